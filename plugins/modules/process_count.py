#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: inferops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: process_count
short_description: Count processes by pid or pattern, or wait until their number is as expected
version_added: 0.1.0
description:
  - Counts the selected processes and returns their pids and details. Never changes anything.
  - With O(expect), waits (event-driven) until the count equals it, and fails listing the processes
    when O(timeout) passes. Replaces C(sleep 2; ps aux | grep X | grep -v grep | wc -l).
author: inferops.sglang maintainers (@inferops)
extends_documentation_fragment:
  - inferops.sglang.attributes
  - inferops.sglang.selection
options:
  expect:
    description: Wait until exactly this many processes match.
    type: int
  timeout:
    description: Seconds to wait for O(expect).
    type: float
    default: 30
attributes:
  check_mode:
    support: full
    details: Counts as usual; with O(expect) it does not wait.
  diff_mode:
    support: none
  platform:
    platforms: linux
    support: full
notes:
  - Zombies are reported under RV(zombies) and not counted.
seealso:
  - module: inferops.sglang.process_kill
"""

EXAMPLES = r"""
- name: No SGLang process is left
  inferops.sglang.process_count:
    pattern: 'sglang\.launch_server|sglang::'
    expect: 0
    timeout: 10

- name: How many schedulers run
  inferops.sglang.process_count:
    pattern: '^sglang::scheduler'
  register: schedulers
"""

RETURN = r"""
count:
  description: How many live processes match.
  returned: always
  type: int
  sample: 3
pids:
  description: Their pids.
  returned: always
  type: list
  elements: int
  sample: [4250, 4251, 4252]
processes:
  description: Each matching process.
  returned: always
  type: list
  elements: dict
  sample: [{pid: 4250, ppid: 4242, pgid: 4242, user: root, state: S, comm: sglang::schedul, cmdline: sglang::scheduler_TP0}]
refused:
  description: Processes that matched but are never counted (init, ancestors, kernel threads, protected), with the reason.
  returned: always
  type: list
  elements: dict
  sample: []
zombies:
  description: Matching processes that are already dead.
  returned: always
  type: list
  elements: dict
  sample: []
missing:
  description: Pids given by number that do not exist.
  returned: always
  type: list
  elements: int
  sample: []
elapsed:
  description: Seconds spent, the wait included.
  returned: always
  type: float
  sample: 0.04
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.inferops.sglang.plugins.module_utils._manager_process_count import ProcessCount
from ansible_collections.inferops.sglang.plugins.module_utils._specs import SELECTION_SPEC


def main():
    spec = dict(SELECTION_SPEC, expect=dict(type="int"), timeout=dict(type="float", default=30.0))
    module = AnsibleModule(argument_spec=spec, required_one_of=[("pid", "pattern")], supports_check_mode=True)
    ProcessCount(module).run()


if __name__ == "__main__":
    main()
