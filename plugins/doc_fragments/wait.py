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
    description: Sent as a Bearer token, where the server was started with C(--api-key).
    type: str
  generate:
    description: Send one tiny real request to C(/generate) and check an answer comes back.
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
