#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: inferops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: process_kill
short_description: Stop processes by pid or pattern, with their trees, safely
version_added: 0.1.0
description:
  - Stops the selected processes and, by default, every descendant of them, with a signal, a grace period
    and an escalation, waiting for each to exit (event-driven, no fixed sleeps).
  - Replaces C(kill PID; sleep 3; ps aux | grep X | grep -v grep | wc -l).
  - Selection by pattern also finds matching processes that were reparented to PID 1 or a subreaper, or
    that left the process group; the real SGLang tree is C(python -m sglang.launch_server) plus
    C(sglang::scheduler_TP*) and C(sglang::detokenizer) children.
author: inferops.sglang maintainers (@inferops)
extends_documentation_fragment:
  - inferops.sglang.attributes
  - inferops.sglang.selection
  - inferops.sglang.stop
options:
  tree:
    description: Also stop every descendant of a selected process.
    type: bool
    default: true
  mode:
    description:
      - V(all) sends O(signal) to every target at once.
      - V(mixed) does what systemd's C(KillMode=mixed) does, and what lets SGLang drain its requests
        - O(signal) to the root processes only (targets whose parent is not a target), a wait of up to O(grace)
        for them, then O(escalate) to everything of the tree still alive.
    type: str
    choices: [all, mixed]
    default: all
attributes:
  check_mode:
    support: full
    details: Returns the targets it would signal and signals nothing.
  diff_mode:
    support: full
    details: The processes that would stop, one per line, as the "before" side.
  platform:
    platforms: linux
    support: full
notes:
  - Fails, listing them, when processes are still alive after the escalation; a process in uninterruptible
    sleep (state D) is reported as stuck.
  - Zombies are reported under RV(zombies), not counted as alive and not signalled.
seealso:
  - module: inferops.sglang.process_count
  - module: inferops.sglang.gpu_release
"""

EXAMPLES = r"""
- name: Stop the hand-started SGLang server and its workers, letting it drain for up to 60 s
  inferops.sglang.process_kill:
    pattern: 'sglang\.launch_server'
    mode: mixed
    grace: 60

- name: Stop one process by pid, no tree, SIGINT first
  inferops.sglang.process_kill:
    pid: 12345
    tree: false
    signal: INT
    grace: 5

- name: What would be stopped (touches nothing)
  inferops.sglang.process_kill:
    pattern: 'sglang::'
  check_mode: true
  register: plan
"""

RETURN = r"""
targets:
  description: Each process stopped (or, in check mode, that would be), with what it was sent and how it ended.
  returned: always
  type: list
  elements: dict
  sample:
    - pid: 4242
      ppid: 1
      pgid: 4242
      user: root
      state: S
      comm: python
      cmdline: /opt/sglang/venv/bin/python -m sglang.launch_server --model-path /models/m --api-key ********
      signals: [TERM]
      ended_by: signal
    - pid: 4250
      ppid: 4242
      pgid: 4242
      user: root
      state: S
      comm: sglang::schedul
      cmdline: sglang::scheduler_TP0
      signals: []
      ended_by: with its parent
escalated:
  description: Whether the escalation signal was needed.
  returned: always
  type: bool
  sample: false
remaining:
  description: Pids still alive at the end (empty on success).
  returned: always
  type: list
  elements: int
  sample: []
stuck:
  description: Pids of RV(remaining) in uninterruptible sleep (state D).
  returned: always
  type: list
  elements: int
  sample: []
refused:
  description: Processes that matched but are never touched (init, ancestors, kernel threads, protected), with the reason.
  returned: always
  type: list
  elements: dict
  sample: [{pid: 812, cmdline: /usr/bin/nvidia-persistenced, reason: protected (nvidia-persistenced)}]
zombies:
  description: Matching processes that are already dead (zombies).
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
  description: Seconds the module spent.
  returned: always
  type: float
  sample: 1.27
timings:
  description: Seconds until the first signal's wait ended.
  returned: when something was signalled
  type: dict
  sample: {first_signal: 1.2}
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.inferops.sglang.plugins.module_utils._manager_process_kill import ProcessKill
from ansible_collections.inferops.sglang.plugins.module_utils._specs import SELECTION_SPEC, STOP_SPEC


def main():
    spec = dict(SELECTION_SPEC, **STOP_SPEC)
    spec.update(tree=dict(type="bool", default=True), mode=dict(type="str", choices=["all", "mixed"], default="all"))
    module = AnsibleModule(argument_spec=spec, required_one_of=[("pid", "pattern")], supports_check_mode=True)
    ProcessKill(module).run()


if __name__ == "__main__":
    main()
