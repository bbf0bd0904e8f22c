# -*- coding: utf-8 -*-
# Copyright: inferops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type


class ModuleDocFragment(object):
    # The process-selection options of process_kill, process_count and gpu_release.
    DOCUMENTATION = r"""
options:
  pid:
    description:
      - One process id or a list of them. Each must be a positive integer.
      - PID 1 and the module's own process are refused with an error.
    type: list
    elements: raw
  pattern:
    description:
      - A Python regular expression searched in each process's command line (arguments joined by spaces).
      - A pattern that matches an empty command line (such as V(.*), V(a*) or an empty one) would match every
        process and is refused.
      - Never matched, whatever the pattern, PID 1, the module's own process and all its ancestors (the
        Ansible wrapper and the shell whose arguments contain the pattern), kernel threads and protected processes.
    type: str
  user:
    description: Only processes of this user (name or uid).
    type: str
  exclude:
    description: Regular expressions; a process whose command line matches any of them is left out.
    type: list
    elements: str
    default: []
  max_targets:
    description:
      - Refuse, naming what matched, when more processes than this would be hit.
    type: int
    default: 64
  protect:
    description:
      - More executable names to protect, added to the built-in list V(sshd), V(systemd), V(nvidia-persistenced),
        V(nv-hostengine), V(dcgm-exporter), V(nvidia-fabricmanager), V(Xorg).
      - Protection is decided on the basename of the executable and of argv[0] (comm is cut at 15 characters).
    type: list
    elements: str
    default: []
  unprotect:
    description:
      - Names to take off the protected list, explicitly. A name that is not protected is an error.
    type: list
    elements: str
    default: []
  redact:
    description:
      - More command-line flags whose value is a secret. C(--api-key), C(--admin-api-key), C(--hf-token),
        C(--token) and C(--password) values, and C(*_TOKEN=), C(*_KEY=), C(*_SECRET=), C(*_PASSWORD=) assignments
        are always masked in what the module returns.
    type: list
    elements: str
    default: []
notes:
  - Linux only; reads C(/proc). Needs only the Python standard library on the managed host.
  - A process is identified by its pid and its start time, so a pid reused by another process is never taken
    for the one found.
"""
