#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: inferops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: gpu_release
short_description: Find and stop the processes holding NVIDIA device files, sparing the NVIDIA daemons
version_added: 0.1.0
description:
  - Finds every process holding a device file by reading C(/proc/PID/fd) links, as C(fuser) and C(lsof) do.
  - With O(state=released), stops the holders of the chosen GPUs with TERM, a grace period and KILL.
    Protected daemons (C(nvidia-persistenced), C(nv-hostengine), C(dcgm-exporter), C(nvidia-fabricmanager),
    C(Xorg), ...) are reported under RV(protected) and never touched, unlike C(fuser -k /dev/nvidia*).
  - When C(nvidia-smi) exists, reads per-GPU memory and compute apps before and after, and waits until
    nvidia-smi lists none of the released processes and each GPU's C(memory.used) has dropped by what they
    held (nvidia-smi stops listing a process before its memory is back). Without it, says so and relies on
    the device-file scan.
author: inferops.sglang maintainers (@inferops)
extends_documentation_fragment:
  - inferops.sglang.attributes
  - inferops.sglang.selection
  - inferops.sglang.stop
options:
  state:
    description: V(query) reports the holders; V(released) stops the targets.
    type: str
    choices: [query, released]
    default: query
  devices:
    description:
      - Globs of the device files. The default covers every NVIDIA node, including the caps in their subfolder
        that C(/dev/nvidia*) misses.
    type: list
    elements: str
    default: ['/dev/nvidia*', '/dev/nvidia-caps/*']
  gpus:
    description:
      - GPU indices. Only processes holding C(/dev/nvidia<i>) for one of them are targets; default all GPUs.
      - Holding only the shared nodes (C(nvidiactl), C(nvidia-uvm), caps) never makes a process a target
        (every CUDA process holds them); such processes are listed under RV(shared_only).
    type: list
    elements: int
  timeout:
    description:
      - Seconds to wait, after the processes are gone, for nvidia-smi to stop listing them and for each GPU's
        C(memory.used) to drop by what they held (less 64 MiB of bookkeeping); the module fails past it.
    type: float
    default: 60
attributes:
  check_mode:
    support: full
    details: Returns the holders and the plan; signals nothing.
  diff_mode:
    support: full
    details: The processes that would be released, as the "before" side.
  platform:
    platforms: linux
    support: full
seealso:
  - module: inferops.sglang.process_kill
"""

EXAMPLES = r"""
- name: Who holds the GPUs
  inferops.sglang.gpu_release:
    state: query
  register: holders

- name: Free GPUs 0-7 of whatever SGLang left behind, daemons spared
  inferops.sglang.gpu_release:
    state: released
    gpus: [0, 1, 2, 3, 4, 5, 6, 7]
    grace: 10
"""

RETURN = r"""
holders:
  description: Every process holding a matching device file.
  returned: always
  type: list
  elements: dict
  sample:
    - pid: 5120
      ppid: 1
      pgid: 4242
      user: root
      state: S
      comm: python3
      cmdline: /opt/sglang/venv/bin/python3 -c from multiprocessing.spawn import spawn_main; spawn_main(tracker_fd=4, pipe_handle=6)
      devices: [/dev/nvidia-uvm, /dev/nvidia0, /dev/nvidiactl]
      gpus: [0]
targets:
  description: The holders that are (or, in check mode and query, would be) stopped.
  returned: always
  type: list
  elements: dict
  sample: []
released:
  description: The targets stopped, with the signals sent and how each ended.
  returned: when state=released and something was signalled
  type: list
  elements: dict
  sample: [{pid: 5120, cmdline: python3 -c from multiprocessing.spawn import spawn_main, signals: [TERM], ended_by: signal}]
protected:
  description: Protected holders, never touched.
  returned: always
  type: list
  elements: dict
  sample: [{pid: 812, cmdline: /usr/bin/nvidia-persistenced --user nvidia-persistenced, reason: protected (nvidia-persistenced)}]
shared_only:
  description: Holders of only the shared nodes (ctl, uvm, caps), never targets.
  returned: always
  type: list
  elements: dict
  sample: []
skipped:
  description: Holders never selected for another reason (this module's own process or an ancestor, init).
  returned: always
  type: list
  elements: dict
  sample: []
nvidia_smi:
  description: Whether nvidia-smi was found.
  returned: always
  type: bool
  sample: true
before:
  description: nvidia-smi's per-GPU memory and compute apps before.
  returned: when nvidia-smi exists
  type: dict
  sample: {time: 1796000000.1, gpus: [{index: 0, memory_used_mib: 81234}], compute_apps: [{pid: 5120, name: python3, used_memory_mib: 81000, gpu: 0}]}
after:
  description: The same reading once the released processes' memory was back (the last one, on failure).
  returned: when nvidia-smi exists and something was released
  type: dict
  sample: {time: 1796000003.2, gpus: [{index: 0, memory_used_mib: 0}], compute_apps: []}
memory:
  description:
    - The wait for the memory, from the end of the stop, in seconds (RV(memory.waited)), with when nvidia-smi
      stopped listing the released processes (RV(memory.unlisted)) and how many readings it took.
    - RV(memory.gpus) has, for each GPU where the released processes held memory, what they held (nvidia-smi's
      per-process figures before) and how far C(memory.used) dropped, counting out what the processes that
      stay allocated or freed meanwhile.
  returned: when nvidia-smi exists and something was released
  type: dict
  sample: {waited: 0.31, unlisted: 0.12, readings: 4, gpus: [{index: 0, held_mib: 4614, dropped_mib: 4623, memory_used_mib: 0}]}
  contains:
    waited:
      description: Seconds from the end of the stop until the memory was back (or the timeout).
      type: float
    unlisted:
      description: Seconds from the end of the stop until nvidia-smi listed none of the released processes (null if it still did).
      type: float
    readings:
      description: The nvidia-smi readings taken.
      type: int
    gpus:
      description: Per GPU where they held memory, C(index), C(held_mib), C(dropped_mib) and C(memory_used_mib) at the end.
      type: list
      elements: dict
memory_released_after:
  description: Seconds from the module's start until the released processes' memory was back.
  returned: when nvidia-smi exists and something was released
  type: float
  sample: 0.368
escalated:
  description: Whether the escalation signal was needed.
  returned: when state=released and something was signalled
  type: bool
  sample: false
remaining:
  description: Pids still alive at the end.
  returned: when state=released and something was signalled
  type: list
  elements: int
  sample: []
elapsed:
  description: Seconds spent.
  returned: always
  type: float
  sample: 0.8
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.inferops.sglang.plugins.module_utils._manager_gpu_release import GpuRelease
from ansible_collections.inferops.sglang.plugins.module_utils._specs import DEVICES_SPEC, SELECTION_SPEC, STOP_SPEC


def main():
    spec = dict(SELECTION_SPEC, **STOP_SPEC)
    spec.update(
        DEVICES_SPEC,
        state=dict(type="str", choices=["query", "released"], default="query"),
        gpus=dict(type="list", elements="int"),
        timeout=dict(type="float", default=60.0),
    )
    module = AnsibleModule(argument_spec=spec, supports_check_mode=True)
    GpuRelease(module).run()


if __name__ == "__main__":
    main()
