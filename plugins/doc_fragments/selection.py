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
      - More executable names or shell-style patterns (V(myd-*)) to protect, added to the built-in list of init and
        the service manager (V(init), V(systemd), V(systemd-*), so V(systemd-journald) and V(systemd-logind)),
        V(sshd), V(sshd-*), the message bus and logging (V(dbus-daemon), V(dbus-broker*), V(rsyslogd),
        V(syslog-ng)), container and cluster runtimes (V(containerd), V(containerd-*), V(dockerd),
        V(docker-proxy), V(runc), V(crun), V(conmon), V(podman), V(crio), V(kubelet), V(kube-proxy)), the NVIDIA
        daemons (V(nvidia-persistenced), V(nvidia-fabricmanager), V(nv-hostengine), V(nv-fabricmanager),
        V(dcgm-exporter), V(nvidia-dcgm)) and the display server (V(Xorg), V(Xwayland)).
      - Protection is decided on the basename of the executable and of argv[0] (comm is cut at 15 characters).
    type: list
    elements: str
    default: []
  unprotect:
    description:
      - Names or patterns to take off the protected list, explicitly, as the list spells them (V(systemd-*)). One
        that is not on it is an error.
    type: list
    elements: str
    default: []
  redact:
    description:
      - More command-line flags whose value is a secret. C(--api-key), C(--admin-api-key), C(--hf-token),
        C(--token) and C(--password) values (and those of any prefix argparse takes for them, C(--api-k)), and
        assignments to secret-looking names (C(*TOKEN=), C(*_KEY=), C(*_PASS=), C(*_PWD=), C(*PASSWORD*=),
        C(*PASSWD*=), C(*SECRET*=), C(*CREDENTIAL*=), C(*_AUTH*=)) are always masked in what the module returns.
    type: list
    elements: str
    default: []
notes:
  - Linux only; reads C(/proc). Needs only the Python standard library on the managed host.
  - A process is identified by its pid and its start time, so a pid reused by another process is never taken
    for the one found.
"""
