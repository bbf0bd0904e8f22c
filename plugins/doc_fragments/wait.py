# -*- coding: utf-8 -*-
# Copyright: inferops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.inferops.sglang.plugins.doc_fragments.unit_files import suboptions


class ModuleDocFragment(object):
    # How a server is waited for until it serves, besides where it is (module_utils/_specs.py WAIT_SPEC): model_wait's
    # options (inferops.sglang.wait) and, with SWITCH's, sglang_switch's wait suboptions
    # (inferops.sglang.wait.suboptions, below).
    DOCUMENTATION = r"""
options:
  api_key:
    description:
      - Sent as a Bearer token, where the server was started with C(--api-key), on C(/v1/models) and C(/generate)
        only (C(/ready) and C(/health) are asked without it).
      - For a server on this host, only on a connection that a process of the server's unit (its cgroup) or of its
        pid's family accepted, looked at on that very connection (during a model load the port is free, and any
        local user could bind it). A local server must therefore be given its unit or pid.
    type: str
  generate:
    description:
      - Send one tiny real request to C(/generate) and check that it generated at least one token
        (C(meta_info.completion_tokens)). Its text may be empty (a model whose first token ends the sequence); that
        is a working server.
    type: bool
    default: false
  timeout:
    description: Seconds to wait in all.
    type: float
    default: 900
"""

    # sglang_switch's own wait suboptions: the server's URL, which it must be given, and the model it served before.
    SWITCH = r"""
options:
  url:
    description: The server's base URL.
    type: str
    required: true
  model:
    description: The model it must serve (the one served before the switch); another one fails the wait.
    type: str
"""


ModuleDocFragment.SUBOPTIONS = suboptions("wait", ModuleDocFragment.DOCUMENTATION, ModuleDocFragment.SWITCH)
