# -*- coding: utf-8 -*-
# Copyright: inferops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type


class ModuleDocFragment(object):
    # How process_kill and gpu_release stop what they target.
    DOCUMENTATION = r"""
options:
  signal:
    description: The first signal, by name (V(TERM), V(SIGINT)) or number.
    type: str
    default: TERM
  escalate:
    description: Sent to what is still alive after O(grace).
    type: str
    default: KILL
  grace:
    description: Seconds to wait for the targets to exit after O(signal), before O(escalate).
    type: float
    default: 30
notes:
  - Each target's pid and start time are checked again before every signal, so a pid reused by another process
    is never signalled.
"""
