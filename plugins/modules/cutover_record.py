#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: inferops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: cutover_record
short_description: Keep the record of a cutover or a rollback on the host, and its figures for Prometheus
version_added: 0.2.0
description:
  - Writes the record as JSON to C(last.json) and to C(history/YYYYmmddTHHMMSSZ-KIND.json) (the record's time,
    UTC), and as markdown to C(last.md), in the port's state folder; mode 0640, owned by root, the folders 0700.
  - Once written, the history keeps the newest O(history) records and removes older ones. Records that release 0.2.0
    kept beside C(last.json) (C(KIND-YYYYmmddTHHMMSSZ.json)) move into C(history/).
  - With O(metrics_dir), also the port's figures in Prometheus's text format, for node_exporter's textfile
    collector, from the record given (or, without O(record), from C(last.json) as the host holds it; nothing when
    there is none yet), see O(metrics_dir).
  - A file is written only when it differs, atomically (a new file beside it, renamed over it); everything is
    checked before anything is written. M(inferops.sglang.sglang_switch) keeps the same record itself when asked,
    through the same code; the P(inferops.sglang.cutover#role) role uses this module for an adoption, when a
    throughput gate comes between the switch and the record, and for the figures.
author: inferops.sglang maintainers (@inferops)
extends_documentation_fragment:
  - inferops.sglang.attributes
options:
  dir:
    description: The port's state folder.
    type: path
    required: true
  record:
    description:
      - What was done; its C(time) (seconds since the epoch) names the file of this run. Secrets masked.
      - Null, the record is not written (the switch kept it); O(metrics_dir) then reads C(last.json).
    type: dict
  kind:
    description: What the record is of.
    type: str
    choices: [cutover, rollback, adopt]
    default: cutover
  history:
    description: How many records C(history/) keeps, the newest; at least 1.
    type: int
    default: 20
    version_added: 0.3.0
  metrics_dir:
    description:
      - node_exporter's textfile collector folder (its C(--collector.textfile.directory)); the port's figures go
        to C(inferops_sglang_PORT.prom) there, root's, 0644. Empty or null, none.
      - An absolute path without C(.) or C(..) parts; the folder and every folder above it (and any link's target)
        must be root's and writable by root alone, else the module fails and writes nothing.
      - C(inferops_sglang_info{port,unit,version,model,mode}) is always 1; C(mode) is V(switch) (the service took
        over, or restarted), V(adopt) (the running server adopted in place) or V(rollback); C(version) and C(model)
        are empty where the record does not say (a rollback's record).
      - C(inferops_sglang_last_cutover_timestamp_seconds) is when the run began (seconds since the epoch).
      - C(inferops_sglang_last_downtime_seconds) is how long the port did not serve, stop to ready (the record's
        C(downtime_until_ready_sec); a rollback's step back plus its load; 0 for an adoption).
        C(inferops_sglang_last_load_seconds) is the model's load, part of that downtime (none for an adoption).
      - C(inferops_sglang_last_result{port,result}) is 1 for what the run left serving the port and 0 for the other
        state; C(result) is V(success) (the service serves) or V(rolled_back) (the command captured before serves).
      - Every series carries the C(port) label; the same text for the same record, so a rerun rewrites nothing.
    type: path
    version_added: 0.3.0
  restarts:
    description:
      - The unit's restarts by systemd (the C(restarts) of M(inferops.sglang.sglang_discover), whose C(reasons) maps
        each result to its count), or null for none. With O(metrics_dir), C(inferops_sglang_restarts_total{port,reason}),
        a counter per reason, the unit's result before each (V(watchdog) when the liveness checker found the server
        hung, V(exit-code), V(signal)...), as the journal keeps them.
    type: dict
    version_added: 0.3.0
attributes:
  check_mode:
    support: full
    details: Says which files would be written (and which records the history would no longer keep), writes none.
  diff_mode:
    support: none
  platform:
    platforms: linux
    support: full
seealso:
  - module: inferops.sglang.sglang_switch
"""

EXAMPLES = r"""
- name: Record the cutover of port 30000
  inferops.sglang.cutover_record:
    dir: /var/lib/inferops/cutover/30000
    record: {time: 1764500000.5, host: gpu-01, port: 30000, action: switch}
    history: 50

- name: The port's figures for node_exporter's textfile collector, from the record the host holds
  inferops.sglang.cutover_record:
    dir: /var/lib/inferops/cutover/30000
    metrics_dir: /var/lib/node_exporter/textfile_collector
"""

RETURN = r"""
files:
  description: The record's files (none without O(record)).
  returned: always
  type: list
  elements: str
  sample: [/var/lib/inferops/cutover/30000/last.json,
           /var/lib/inferops/cutover/30000/history/20261130T101500Z-cutover.json]
written:
  description: The files that differed, the record's and the textfile (and were written, outside check mode).
  returned: always
  type: list
  elements: str
  sample: [/var/lib/inferops/cutover/30000/last.json]
removed:
  description: The oldest records that the history no longer keeps (removed, outside check mode).
  returned: always
  type: list
  elements: str
  sample: [/var/lib/inferops/cutover/30000/history/20261101T101500Z-cutover.json]
  version_added: 0.3.0
metrics:
  description: The port's textfile (none without O(metrics_dir), or without a record yet).
  returned: always
  type: list
  elements: str
  sample: [/var/lib/node_exporter/textfile_collector/inferops_sglang_30000.prom]
  version_added: 0.3.0
report:
  description: The record as markdown (C(last.md)); null without O(record).
  returned: always
  type: str
  sample: "# Cutover of port 30000 on gpu-01"
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.inferops.sglang.plugins.module_utils._manager_cutover_record import HISTORY_KEEP, CutoverRecord
from ansible_collections.inferops.sglang.plugins.module_utils._switch.states import KINDS, Kinds


def main():
    module = AnsibleModule(
        argument_spec=dict(
            dir=dict(type="path", required=True),
            record=dict(type="dict"),
            kind=dict(type="str", choices=list(KINDS), default=Kinds.CUTOVER),
            history=dict(type="int", default=HISTORY_KEEP),
            metrics_dir=dict(type="path"),
            restarts=dict(type="dict"),
        ),
        required_one_of=[("record", "metrics_dir")],
        supports_check_mode=True,
    )
    CutoverRecord(module).run()


if __name__ == "__main__":
    main()
