#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: inferops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: sglang_unit
short_description: Install an SGLang server's systemd unit, its environment file and its readiness gate in one step
version_added: 0.2.0
description:
  - Looks at the unit and the files once, and writes a file only when its content, mode or owner differs
    (atomically, owned by root).
  - The unit is written for the host's systemd (C(systemctl --version)) - a setting newer than it is replaced by
    its older equivalent or left out, and said so in RV(omitted) - then, when its text changes, verified with
    C(systemd-analyze verify) before anything is written, in check mode too; a rejected unit fails the task and
    nothing is written.
  - Reloads systemd when the unit's text changed, enables or disables it, and starts or restarts it when told to.
  - The P(inferops.sglang.systemd_unit#role) role renders the texts and calls this module.
author: inferops.sglang maintainers (@inferops)
extends_documentation_fragment:
  - inferops.sglang.attributes
  - inferops.sglang.unit_files
options:
  name:
    description: The service's name, without C(.service).
    type: str
    required: true
  enabled:
    description: Whether the unit starts at boot.
    type: bool
    default: true
  state:
    description:
      - V(present) installs only; V(started) also starts the service when it is not running (blocking until its
        readiness gate says ready, within the unit's C(TimeoutStartSec)).
    type: str
    choices: [present, started]
    default: present
  restart_on_change:
    description: Restart the service when it runs and its unit or environment file changed.
    type: bool
    default: false
attributes:
  check_mode:
    support: full
    details: Verifies a changed unit as usual; writes, reloads, enables and starts nothing, and says what it would.
  diff_mode:
    support: full
    details: The unit's and the gate's text before and after; the environment file's names only, values masked.
  platform:
    platforms: linux
    support: full
seealso:
  - module: inferops.sglang.sglang_switch
"""

EXAMPLES = r"""
- name: A unit written out, verified, installed and enabled, not started
  inferops.sglang.sglang_unit:
    name: sglang-30000
    unit: |
      [Unit]
      Description=SGLang inference server on port 30000
      After=network-online.target
      [Service]
      EnvironmentFile=/etc/inferops/sglang/sglang-30000.env
      ExecStart=/opt/sglang/venv/bin/python -m sglang.launch_server --model-path /models/llama --port 30000 --api-key ${SGLANG_API_KEY}
      Restart=on-failure
      [Install]
      WantedBy=multi-user.target
    environment: "SGLANG_API_KEY={{ sglang_api_key }}\n"
    environment_path: /etc/inferops/sglang/sglang-30000.env
    wants: [nvidia-persistenced.service]

- name: The hardened unit of the systemd_unit role, rendered (nothing written yet)
  ansible.builtin.include_role:
    name: inferops.sglang.systemd_unit
    tasks_from: render
  vars:
    systemd_unit_name: sglang-30000
    systemd_unit_command: [/opt/sglang/venv/bin/python, -m, sglang.launch_server, --model-path, /models/llama, --port, "30000"]

- name: That unit, its environment file and its readiness gate installed
  inferops.sglang.sglang_unit:
    name: sglang-30000
    unit: "{{ systemd_unit_rendered.unit }}"
    environment: "{{ systemd_unit_rendered.environment }}"
    environment_path: "{{ systemd_unit_rendered.environment_path }}"
    gate: "{{ systemd_unit_rendered.gate }}"
    gate_path: "{{ systemd_unit_rendered.gate_path }}"
    wants: "{{ systemd_unit_rendered.wants }}"
  no_log: true  # the environment file holds secrets
"""

RETURN = r"""
elapsed:
  description: Seconds the module took on the host.
  returned: always
  type: float
  sample: 0.42
unit:
  description: The service.
  returned: always
  type: str
  sample: sglang-30000.service
unit_path:
  description: The unit file.
  returned: always
  type: str
  sample: /etc/systemd/system/sglang-30000.service
checksum:
  description: SHA-1 of the unit's text as installed.
  returned: always
  type: str
  sample: 6f1ed002ab5595859014ebf0951522d9f2d2b1d1
environment_file:
  description: The environment file, or null.
  returned: always
  type: str
  sample: /etc/inferops/sglang/sglang-30000.env
changed_files:
  description: The files that differed (and were written, outside check mode).
  returned: always
  type: list
  elements: str
  sample: [/etc/systemd/system/sglang-30000.service]
wants_present:
  description: The O(wants) units this host has.
  returned: always
  type: list
  elements: str
  sample: [nvidia-persistenced.service]
systemd_version:
  description:
    - The host's systemd version (C(systemctl --version)), the one the unit is written for. Null when it could not be
      read; the unit is then written as given.
  returned: always
  type: int
  sample: 247
omitted:
  description:
    - The unit's settings this host's systemd is too old for, with the version each needs; those with an older
      equivalent are replaced by it (C(Type=exec) by C(Type=simple)), the others left out.
  returned: always
  type: list
  elements: str
  sample: ["RestrictSUIDSGID=yes (needs 242)"]
active_state:
  description: The service's ActiveState before this call.
  returned: always
  type: str
  sample: inactive
reloaded:
  description: Whether systemd was (or would be) reloaded.
  returned: always
  type: bool
  sample: true
enabled_changed:
  description: Whether the unit was (or would be) enabled or disabled.
  returned: always
  type: bool
  sample: true
started:
  description: Whether the service was (or would be) started.
  returned: always
  type: bool
  sample: false
restarted:
  description: Whether the service was (or would be) restarted.
  returned: always
  type: bool
  sample: false
restart_needed:
  description: The service runs, its unit or environment changed, and O(restart_on_change) is false.
  returned: always
  type: bool
  sample: false
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.inferops.sglang.plugins.module_utils._manager_sglang_unit import SglangUnit
from ansible_collections.inferops.sglang.plugins.module_utils._specs import UNIT_FILES_SPEC


def main():
    module = AnsibleModule(
        argument_spec=dict(
            UNIT_FILES_SPEC,
            name=dict(type="str", required=True),
            enabled=dict(type="bool", default=True),
            state=dict(type="str", choices=["present", "started"], default="present"),
            restart_on_change=dict(type="bool", default=False),
        ),
        supports_check_mode=True,
    )
    SglangUnit(module).run()


if __name__ == "__main__":
    main()
