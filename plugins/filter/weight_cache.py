# -*- coding: utf-8 -*-
# Copyright: inferops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

# Documented in weight_cache.yml beside this file.

from ansible.errors import AnsibleFilterError
from ansible_collections.inferops.sglang.plugins.module_utils._server import weight_cache as _weight_cache


def weight_cache(command, environment=None, python=None):
    if not isinstance(command, (list, tuple)) or not command or not all(isinstance(a, str) for a in command):
        raise AnsibleFilterError("weight_cache wants the server's command as a non-empty list of strings, not %r"
                                 % (command,))
    problems = _weight_cache.problems(command)
    conf = str((environment or {}).get("PYTORCH_CUDA_ALLOC_CONF", ""))
    if "expandable_segments:true" in conf.replace(" ", "").lower():
        problems.append("PYTORCH_CUDA_ALLOC_CONF=%s: SGLang's weight cache daemon refuses expandable_segments:True"
                        % conf)
    daemon = _weight_cache.daemon_command(command, python) if not problems else []
    if daemon and not daemon[0]:
        problems.append("the Python that %s runs on is not known: the weight cache daemon runs on it" % command[0])
    ok = not problems
    return {"problems": problems, "daemon": daemon if ok else [],
            "client": _weight_cache.client_command(command) if ok else list(command),
            "ranks": _weight_cache.local_ranks(command) if ok else 0}


class FilterModule(object):
    def filters(self):
        return {"weight_cache": weight_cache}
