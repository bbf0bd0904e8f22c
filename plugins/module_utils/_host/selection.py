# -*- coding: utf-8 -*-
# Copyright: inferops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Choosing processes by pid or pattern, safely: shared by process_kill, process_count and gpu_release."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import fnmatch
import os
import re

from ansible_collections.inferops.sglang.plugins.module_utils._host import procfs as _procfs

# Never touched, whatever matched: decided on the executable's and argv[0]'s basename, each a shell-style pattern
# (fnmatch): init and the service manager and its helpers, logins and remote shells, the system's message bus and
# logging, container and cluster runtimes, the NVIDIA daemons and the display server.
PROTECTED = ("init", "systemd", "systemd-*", "sshd", "sshd-*", "dbus-daemon", "dbus-broker*",
             "rsyslogd", "syslog-ng", "containerd", "containerd-*", "dockerd", "docker-proxy", "runc", "crun",
             "conmon", "podman", "crio", "kubelet", "kube-proxy", "nvidia-persistenced", "nvidia-fabricmanager",
             "nv-hostengine", "nv-fabricmanager", "dcgm-exporter", "nvidia-dcgm", "Xorg", "Xwayland")
DEFAULT_MAX_TARGETS = 64


class SelectionError(Exception):
    """Bad input: the message says what was wrong and what to do."""


def _as_pids(value):
    if value is None:
        return []
    items = value if isinstance(value, (list, tuple)) else [value]
    out = []
    for item in items:
        try:
            pid = int(str(item).strip())
        except ValueError:
            raise SelectionError("pid %r is not an integer: give process ids as positive integers" % (item,))
        if pid <= 0:
            raise SelectionError("pid %d is not positive: give process ids as positive integers" % pid)
        out.append(pid)
    return out


def _compile(pattern, what):
    try:
        return re.compile(pattern)
    except re.error as e:
        raise SelectionError("%s %r is not a valid regular expression: %s" % (what, pattern, e))


class Selector:
    """What to select, validated up front: bad input raises SelectionError before anything is read or signalled."""

    def __init__(self, pid=None, pattern=None, user=None, exclude=None, max_targets=DEFAULT_MAX_TARGETS,
                 protect=None, unprotect=None, me=None, required=True, redact=None):
        self.pids = _as_pids(pid)
        self.redact = redact or (lambda text: text)
        self.me = os.getpid() if me is None else me
        if pattern is not None and not isinstance(pattern, str):
            raise SelectionError("pattern must be a string")
        if required and pattern is None and not self.pids:
            raise SelectionError("give pid, pattern or both: nothing to select")
        self.pattern = _compile(pattern, "pattern") if pattern is not None else None
        if self.pattern is not None and self.pattern.search("") is not None:
            raise SelectionError("pattern %r matches every process (it matches an empty command line); "
                                 "give a pattern that names the server, for example 'sglang\\.launch_server'" % pattern)
        if 1 in self.pids:
            raise SelectionError("pid 1 is the init process and is never selected")
        if self.me in self.pids:
            raise SelectionError("pid %d is this module's own process and is never selected" % self.me)
        self.user = user
        self.exclude = [_compile(x, "exclude pattern") for x in (exclude or [])]
        if max_targets is not None and int(max_targets) < 1:
            raise SelectionError("max_targets must be at least 1")
        self.max_targets = int(max_targets) if max_targets is not None else None
        unknown = set(unprotect or []) - set(PROTECTED) - set(protect or [])
        if unknown:
            raise SelectionError("unprotect names %s, which are not protected (give a protected name or pattern as it "
                                 "is listed: %s)" % (", ".join(sorted(unknown)), ", ".join(PROTECTED)))
        self.protected = (set(PROTECTED) | set(protect or [])) - set(unprotect or [])

    # --- what a process is to us ---------------------------------------------------------
    def refusal(self, proc, ancestors):
        """Why proc can never be selected (or None)."""
        if proc.pid == 1:
            return "init"
        if proc.pid in ancestors:
            return "self" if proc.pid == self.me else "ancestor"
        if proc.is_kernel_thread:
            return "kernel thread"
        names = sorted(n for n in proc.names() if any(fnmatch.fnmatchcase(n, p) for p in self.protected))
        if names:
            return "protected (%s)" % ", ".join(names)
        return None

    def matches(self, proc):
        """Does proc answer the pid/pattern/user/exclude filters (before any safety refusal)?

        With neither pid nor pattern (required=False), every process answers them.
        """
        if proc.is_kernel_thread:
            return False
        if self.pids or self.pattern is not None:
            hit = proc.pid in self.pids
            if not hit and self.pattern is not None:
                hit = self.pattern.search(proc.cmdline) is not None
            if not hit:
                return False
        if self.user is not None and proc.user != self.user and str(proc.uid) != str(self.user):
            return False
        return not any(x.search(proc.cmdline) for x in self.exclude)

    def prefilter(self, pid, cmdline):
        """From the command line alone: could this process answer the pid/pattern filters?"""
        if pid in self.pids:
            return True
        return self.pattern is not None and bool(cmdline) and self.pattern.search(cmdline) is not None

    def select(self, procs=None, tree=False):
        """Selection over a snapshot (taken here when not given; a full one when the tree is wanted).

        Returns a Selection.
        """
        if procs is None:
            procs = _procfs.snapshot(None if tree or not (self.pids or self.pattern) else self.prefilter)
        ancestors = set(_procfs.ancestors(self.me, procs))
        sel = Selection()
        matched = [p for p in procs.values() if self.matches(p)]
        sel.missing = [pid for pid in self.pids if pid not in procs]
        chosen = {}
        for p in matched:
            chosen[p.pid] = "match"
        if tree:
            for pid in _procfs.descendants(procs, [p.pid for p in matched]):
                chosen.setdefault(pid, "descendant")
        for pid in sorted(chosen):
            p = procs[pid]
            why = self.refusal(p, ancestors)
            if why:
                if chosen[pid] == "match" or why.startswith("protected"):
                    sel.refused.append((p, why))
                continue
            if p.is_zombie:
                sel.zombies.append(p)
                continue
            sel.targets.append(p)
            sel.reason[pid] = chosen[pid]
        self.check_count(sel.targets)
        return sel

    def check_count(self, targets):
        if self.max_targets is not None and len(targets) > self.max_targets:
            show = self.redact
            raise SelectionError(
                "%d processes would be hit, more than max_targets=%d; narrow the selection or raise "
                "max_targets. They are: %s" % (len(targets), self.max_targets,
                                               "; ".join("%d %s" % (p.pid, show(p.cmdline)[:120]) for p in targets)))


class Selection:
    def __init__(self):
        self.targets = []   # Process, alive, may be signalled
        self.reason = {}    # pid -> "match" | "descendant" (| "holder" for gpu_release)
        self.refused = []   # (Process, why) that matched but are never touched
        self.zombies = []   # Process, dead already
        self.missing = []   # pids asked for by number that do not exist

    def roots(self):
        """Targets whose parent is not a target: where a tree stop (mixed mode) sends its first signal."""
        pids = set(p.pid for p in self.targets)
        return [p for p in self.targets if p.ppid not in pids]
