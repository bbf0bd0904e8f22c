#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: inferops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: sglang_adopt
short_description: Put the running SGLang server on a port under systemd in place, without a restart
version_added: 0.2.0
description:
  - B(Look) at what serves O(port) and its family (its tree and the kin that left it, orphans included), as
    M(inferops.sglang.sglang_switch) does. Anything that is not an SGLang server, or listeners outside the family,
    fail the module and nothing is touched.
  - B(Move) the whole family into a transient scope, C(UNIT-adopted.scope), in one call to systemd's
    C(StartTransientUnit) (with C(busctl)). The scope conflicts with the service and is ordered before it, so
    starting C(UNIT.service) stops the scope first. Nothing is stopped or restarted; when the move fails part way,
    every process keeps running where it is and the failure says where each one is.
  - B(Neutralise) a shell loop that would start a second copy (SIGKILL to the loop alone; the server is untouched).
  - B(Watch) - C(UNIT-adopted-watch.service), a transient service C(PartOf=) the scope. Stopping the scope stops
    it first, and it drains the server (SIGTERM, up to O(drain) seconds) before the scope kills what is left,
    orphans included. When the server ends on its own (a crash, an OOM kill), it starts C(UNIT.service) - unless
    a switch of the port holds its lock.
  - The service itself is not installed here (M(inferops.sglang.sglang_unit) does, enabled and not started).
  - Before the move, the other system units that could serve O(port) and are enabled or running (found as
    M(inferops.sglang.sglang_switch) finds them), which would fight the service at its next start, are taken over
    as the switch does with O(existing_units=replace) (backed up into the port's state folder, disabled, stopped), or
    with O(existing_units=refuse) fail the module, nothing touched; and O(capture) is kept as C(capture.json) (mode
    0600), what a rollback starts again.
  - A rerun finds the family in the scope and the watcher running, and does nothing.
author: inferops.sglang maintainers (@inferops)
extends_documentation_fragment:
  - inferops.sglang.attributes
  - inferops.sglang.server.redact
  - inferops.sglang.server
  - inferops.sglang.server.devices
  - inferops.sglang.server.handover
options:
  unit:
    description: The service that takes over at its next start (name without C(.service)); the scope and the
      watcher are named after it.
    type: str
    required: true
  state_dir:
    description: The port's switch lock is O(state_dir)/PORT/switch.lock (a switch in progress stops the adoption;
      a switch that holds it stops the server without a takeover).
    type: path
    default: /var/lib/inferops/cutover
  drain:
    description: Seconds the server may take to drain after SIGTERM when the scope stops (the scope's
      C(TimeoutStopSec)), before SIGKILL.
    type: float
    default: 120
attributes:
  check_mode:
    support: full
    details: Looks and says what it would do.
  diff_mode:
    support: none
  platform:
    platforms: linux
    support: full
notes:
  - The managed host needs Python's standard library and systemd (C(busctl), C(systemd-run)).
  - Until the service starts, the server's output still goes where it went (its nohup file), not to the journal,
    and nothing restarts it but the watcher's takeover.
seealso:
  - module: inferops.sglang.sglang_switch
  - module: inferops.sglang.sglang_unit
"""

EXAMPLES = r"""
- name: Under systemd now; sglang-30000.service takes over at its next start
  inferops.sglang.sglang_adopt:
    port: 30000
    unit: sglang-30000
    drain: 120
  register: adopted
"""

RETURN = r"""
action:
  description: V(adopt) (moved, neutralised, watched), V(attach) (kin born since the adoption moved in), V(watch)
    (the watcher started again) or V(none).
  returned: always
  type: str
  choices: [none, adopt, attach, watch]
  sample: adopt
began:
  description: When the module looked (seconds since the epoch).
  returned: always
  type: float
  sample: 1796000000.5
scope:
  description: The scope that holds the family.
  returned: always
  type: str
  sample: sglang-30000-adopted.scope
watcher:
  description: The watcher's transient service.
  returned: always
  type: str
  sample: sglang-30000-adopted-watch.service
preflight:
  description: What is on the port, as M(inferops.sglang.sglang_switch) returns it.
  returned: always
  type: dict
  sample: {owner: adhoc, family: [{pid: 4242, cmdline: "python -m sglang.launch_server ..."}]}
steps:
  description: Each phase with its duration in seconds.
  returned: always
  type: list
  elements: dict
  sample: [{step: move, seconds: 0.05, moved: [4242, 4250]}, {step: neutralise, seconds: 0.0}, {step: watch, seconds: 0.1}]
pid:
  description: The server's main process.
  returned: when a server serves the port
  type: int
  sample: 4242
since:
  description: When the server started (seconds since the epoch).
  returned: when a server serves the port
  type: float
  sample: 1796000000.5
log:
  description: Where the server's standard output goes (its nohup file, until the service starts).
  returned: when a server serves the port
  type: str
  sample: /root/sglang.log
in_scope:
  description: Whether the server is in the scope now.
  returned: when a server serves the port
  type: bool
  sample: true
units:
  description: The other system units that could serve O(port), each with what the adoption does to it (C(action)
    V(replace), V(refuse) or V(leave); C(does) in words), as M(inferops.sglang.sglang_switch) returns them.
  returned: always
  type: list
  elements: dict
  sample: [{unit: sglang-kimi.service, unit_file_state: enabled, active_state: inactive, action: replace,
            does: "backed up, disabled"}]
units_taken:
  description: The units the adoption took over, as C(units.json) in the port's state folder keeps them.
  returned: when the adoption ran
  type: list
  elements: dict
  sample: [{unit: sglang-kimi.service, action: replace, before: {UnitFileState: enabled, ActiveState: inactive}}]
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.inferops.sglang.plugins.module_utils._manager_sglang_adopt import SglangAdopt
from ansible_collections.inferops.sglang.plugins.module_utils._specs import HANDOVER_SPEC, REDACT_SPEC, TAKEOVER_SPEC


def main():
    module = AnsibleModule(
        argument_spec=dict(TAKEOVER_SPEC, **dict(REDACT_SPEC, **HANDOVER_SPEC)),
        supports_check_mode=True,
    )
    SglangAdopt(module).run()


if __name__ == "__main__":
    main()
