#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: inferops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: model_prewarm
short_description: Read a model's weight files into the page cache before a restart, saying how far it got
version_added: 0.3.0
description:
  - Reads the parts of O(paths) that the page cache lacks (C(mincore)), in order, with several readers and
    C(posix_fadvise) hints, while the old server still serves, so that the next start of the server loads from memory.
  - Never more than C(MemAvailable) minus O(margin_gib) minus what of the files is resident already, and nothing
    after O(budget) seconds. The files are measured and read as O(user) (the server's own user), never as root, so
    only what that user may read is read.
  - With O(progress), appends what was read so far every O(every) seconds to that file (one JSON line each, root's,
    0600; its C(says) the line in words - the seconds since the module began, what was read of what the warm plans to
    read), for a look from another connection while the module runs under C(async); the file is removed when the
    warm ends. M(inferops.sglang.sglang_discover) with O(inferops.sglang.sglang_discover#module:prewarm=plan) says
    whether a warm is due and lists the files.
  - A warm that fails is reported in RV(warm), never a failure.
author: inferops.sglang maintainers (@inferops)
extends_documentation_fragment:
  - inferops.sglang.attributes
options:
  paths:
    description: The weight files, as M(inferops.sglang.sglang_discover) lists them (RV(inferops.sglang.sglang_discover#module:model_files)'s C(paths)).
    type: list
    elements: path
    required: true
  user:
    description: The user (name or uid) the files are measured and read as.
    type: str
    default: root
  group:
    description: Its group (name or gid); the user's own when not given.
    type: str
  budget:
    description: Seconds the warm may take.
    type: int
    default: 600
  margin_gib:
    description: GiB of C(MemAvailable) the warm leaves to everything else.
    type: int
    default: 8
  progress:
    description: A file to append the warm's progress to, in a folder that no one but root can change (created 0700
      when missing); removed once the warm ends.
    type: path
  every:
    description: Seconds between two lines of progress.
    type: float
    default: 5
attributes:
  check_mode:
    support: full
    details: Measures the page cache, reads nothing.
  diff_mode:
    support: none
  platform:
    platforms: linux
    support: full
notes:
  - The page cache is not the host's state, so the module never reports a change.
  - The managed host needs Python's standard library only.
seealso:
  - module: inferops.sglang.sglang_discover
"""

EXAMPLES = r"""
- name: Find the server and the files it loads
  inferops.sglang.sglang_discover:
    port: 30000
    prewarm: plan
  register: found

- name: Warm them under async, as the server's user, while it still serves
  inferops.sglang.model_prewarm:
    paths: "{{ found.model_files.paths }}"
    user: "{{ found.server.user }}"
    budget: 900
    progress: /var/lib/inferops/cutover/30000/prewarm.jsonl
  async: 1000
  poll: 10
  when: found.model_files.warm_due | default(false)
"""

RETURN = r"""
files:
  description: How many files were given.
  returned: always
  type: int
  sample: 30
bytes:
  description: Their size.
  returned: always
  type: int
  sample: 141107412992
resident:
  description: How much of them the page cache held before the warm.
  returned: always
  type: int
  sample: 57853939712
available:
  description: C(MemAvailable) before the warm.
  returned: always
  type: int
  sample: 1099511627776
errors:
  description: The files that could not be measured, and why.
  returned: always
  type: list
  elements: str
  sample: []
warm:
  description: What the warm did, or null when there was none (RV(warm_skipped) says why).
  returned: always
  type: dict
  contains:
    read:
      description: Bytes read.
      type: int
    seconds:
      description: How long it took.
      type: float
    stopped:
      description: Null, or why it stopped early, V(memory) or V(budget).
      type: str
    resident_after:
      description: How much of the files the page cache held after it.
      type: int
  sample: {read: 83253473280, seconds: 41.2, readers: 4, resident_before: 57853939712, resident_after: 141107412992,
           available: 1099511627776, allowance: 1033069353984, stopped: null, errors: []}
warm_skipped:
  description: Why nothing was read, V(check mode) or V(all resident).
  returned: when there was no warm
  type: str
  sample: all resident
summary:
  description: One line, as the cutover's record says it.
  returned: always
  type: str
  sample: "model: 141 GB in 30 files, 41 % in the page cache, 1.1 TB available; warmed before the stop: 83 GB read in
    41.2 s (4 readers), 100 % resident after"
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.inferops.sglang.plugins.module_utils._manager_model_prewarm import ModelPrewarm


def main():
    module = AnsibleModule(
        argument_spec=dict(
            paths=dict(type="list", elements="path", required=True),
            user=dict(type="str", default="root"),
            group=dict(type="str"),
            budget=dict(type="int", default=600),
            margin_gib=dict(type="int", default=8),
            progress=dict(type="path"),
            every=dict(type="float", default=5.0),
        ),
        supports_check_mode=True,
    )
    ModelPrewarm(module).run()


if __name__ == "__main__":
    main()
