#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: inferops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: sglang_switch
short_description: Switch the server on a port to its systemd unit in one detached, locked, host-side step
version_added: 0.1.0
description:
  - B(Preflight), always, before anything is stopped (alone in check mode). What listens on O(port) is an SGLang
    server; no process outside its family listens there; no process outside its family holds its GPUs, unless
    O(release_strays); O(executable) exists and finds the C(sglang) package; the unit is installed.
    Protected daemons (C(nvidia-persistenced) and the like) are listed and never touched.
  - B(Switch), as one process on the host, detached from the controller (a transient systemd unit started with
    C(systemd-run); a new session where systemd is not PID 1) and holding a lock (one switch per port). It stops a
    wrapper loop that would respawn the server; stop the family in mixed mode (SIGTERM to the server so it drains,
    for up to O(drain) seconds, then SIGKILL to all that is left); verify that none is left and the port is free;
    stop what still holds the server's GPUs (the family's leftovers, strays when allowed) and wait for
    C(nvidia-smi) to show their memory back where it exists; start the unit without blocking.
    A dropped connection or a cancelled job does not stop it half-way.
  - The module waits for that process and returns each step's timing. A run that finds a switch of the port in
    progress waits for it and returns its outcome.
  - When the unit already serves the port, nothing happens unless O(restart) (the cutover sets it when the unit,
    its environment or the venv changed), the unit is stopped (its own drain budget) and started again the same way.
author: inferops.sglang maintainers (@inferops)
extends_documentation_fragment:
  - inferops.sglang.attributes
  - inferops.sglang.server.redact
  - inferops.sglang.server
options:
  unit:
    description: The service to switch to (name without C(.service)); it must be installed, except in check mode.
    type: str
    required: true
  state_dir:
    description: The switch's plan and outcome go to O(state_dir)/PORT/ (mode 0700; files 0600).
    type: path
    default: /var/lib/inferops/cutover
  drain:
    description: Seconds the server may take to drain its in-flight requests after SIGTERM before SIGKILL.
    type: float
    default: 120
  release_strays:
    description: Stop processes outside the family that hold the server's GPUs, instead of failing preflight.
    type: bool
    default: false
  target:
    description:
      - V(unit) switches to the unit. V(capture) switches back (a rollback) - stops the unit, verifies zero,
        releases the GPUs and starts the captured command (its wrapper loop when it had one) exactly as it ran
        (argv, environment, working directory, user, log file), in a session of its own as nohup left it.
    type: str
    choices: [unit, capture]
    default: unit
  restart:
    description: Restart the unit through the switch when it already serves the port.
    type: bool
    default: false
  executable:
    description: The unit's ExecStart executable; preflight checks that it exists and, for a Python, finds sglang.
    type: path
  devices:
    description: Globs of the device files whose holders are the server's GPUs' users.
    type: list
    elements: str
    default: [/dev/nvidia*, /dev/nvidia-caps/*]
  timeout:
    description: Seconds to wait for the switch (it goes on on the host after that). Default O(drain) + 120.
    type: float
attributes:
  check_mode:
    support: full
    details: Runs the preflight and says what the switch would do.
  diff_mode:
    support: none
  platform:
    platforms: linux
    support: full
notes:
  - The managed host needs Python's standard library and systemd; C(nvidia-smi) is used when it exists.
seealso:
  - module: inferops.sglang.sglang_discover
  - module: inferops.sglang.model_wait
  - module: inferops.sglang.gpu_release
"""

EXAMPLES = r"""
- name: Preflight only
  inferops.sglang.sglang_switch:
    port: 30000
    unit: sglang
    executable: /opt/sglang/venv/bin/python
  check_mode: true
  changed_when: false

- name: Switch, then wait for the model
  inferops.sglang.sglang_switch:
    port: 30000
    unit: sglang
    drain: 120
  register: switched

- name: Wait for the model
  inferops.sglang.model_wait:
    url: http://127.0.0.1:30000
    unit: sglang.service
    timeout: 960
"""

RETURN = r"""
action:
  description: V(switch) (an ad-hoc server to the unit), V(restart), V(start) (nothing ran), V(rollback) (back to the
    captured command), V(join) (a switch was in progress) or V(none).
  returned: always
  type: str
  sample: switch
preflight:
  description: What is on the port (owner V(adhoc), V(unit) or null), the server, its family, a wrapper, its GPUs,
    strays and protected holders on them, problems.
  returned: always
  type: dict
  sample: {owner: adhoc, gpus: [0, 1], family: [{pid: 4242, cmdline: "python -m sglang.launch_server ..."}], strays: []}
problems:
  description: Why the switch must not begin (the module then fails).
  returned: always
  type: list
  elements: str
  sample: []
sglang_version:
  description:
    - The version of sglang O(executable) finds, asked only when something is to be started.
    - Null without O(executable), for another program, or when there is nothing to do.
  returned: always
  type: str
  sample: 0.5.23
steps:
  description: Each step of the switch with its duration in seconds.
  returned: when the switch ran
  type: list
  elements: dict
  sample: [{step: stop server, seconds: 5.21}, {step: verify zero, seconds: 0.01}, {step: start unit, seconds: 0.04}]
downtime:
  description: Seconds from the first signal to the old server until the unit was started (the model load follows).
  returned: when a server was stopped
  type: float
  sample: 5.32
pid_started:
  description: The pid of the captured command started again (with O(target=capture)).
  returned: when a rollback ran
  type: int
  sample: 5120
started_at:
  description: When the unit was started (seconds since the epoch).
  returned: when the switch ran
  type: float
  sample: 1796000000.5
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.inferops.sglang.plugins.module_utils._managers import REDACT_SPEC, SglangSwitch


def main():
    module = AnsibleModule(
        argument_spec=dict(
            port=dict(type="int", default=30000),
            unit=dict(type="str", required=True),
            state_dir=dict(type="path", default="/var/lib/inferops/cutover"),
            drain=dict(type="float", default=120.0),
            release_strays=dict(type="bool", default=False),
            target=dict(type="str", choices=["unit", "capture"], default="unit"),
            restart=dict(type="bool", default=False),
            executable=dict(type="path"),
            devices=dict(type="list", elements="str", default=["/dev/nvidia*", "/dev/nvidia-caps/*"]),
            timeout=dict(type="float"),
            **REDACT_SPEC
        ),
        supports_check_mode=True,
    )
    SglangSwitch(module).run()


if __name__ == "__main__":
    main()
