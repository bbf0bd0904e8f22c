#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: inferops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: cutover_record
short_description: Keep the record of a cutover or a rollback on the host
version_added: 0.2.0
description:
  - Writes the record as JSON to C(last.json) and to C(history/YYYYmmddTHHMMSSZ-KIND.json) (the record's time,
    UTC), and as markdown to C(last.md), in the port's state folder; mode 0640, owned by root, the folders 0700.
  - Once written, the history keeps the newest O(history) records and removes older ones. Records that release 0.2.0
    kept beside C(last.json) (C(KIND-YYYYmmddTHHMMSSZ.json)) move into C(history/).
  - A file is written only when it differs, in one call. M(inferops.sglang.sglang_switch) keeps the same record
    itself when asked; the P(inferops.sglang.cutover#role) role uses this module when a throughput gate comes
    between the switch and the record.
author: inferops.sglang maintainers (@inferops)
extends_documentation_fragment:
  - inferops.sglang.attributes
options:
  dir:
    description: The port's state folder.
    type: path
    required: true
  record:
    description: What was done; its C(time) (seconds since the epoch) names the file of this run. Secrets masked.
    type: dict
    required: true
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
attributes:
  check_mode:
    support: full
    details: Says which files would be written, writes none.
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
"""

RETURN = r"""
files:
  description: The record's files.
  returned: always
  type: list
  elements: str
  sample: [/var/lib/inferops/cutover/30000/last.json,
           /var/lib/inferops/cutover/30000/history/20261130T101500Z-cutover.json]
written:
  description: The files that differed (and were written, outside check mode).
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
report:
  description: The record as markdown (C(last.md)).
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
            record=dict(type="dict", required=True),
            kind=dict(type="str", choices=list(KINDS), default=Kinds.CUTOVER),
            history=dict(type="int", default=HISTORY_KEEP),
        ),
        supports_check_mode=True,
    )
    CutoverRecord(module).run()


if __name__ == "__main__":
    main()
