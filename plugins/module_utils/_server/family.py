# -*- coding: utf-8 -*-
# Copyright: inferops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""An SGLang server's family of processes (its tree, and the kin that left it), its schedulers, and a wrapper
that would start it again."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import re

from ansible_collections.inferops.sglang.plugins.module_utils._host import owner as _owner, procfs as _procfs


_KIN = ("multiprocessing.spawn", "multiprocessing.resource_tracker", "multiprocessing.forkserver")
SHELLS = ("sh", "bash", "dash", "zsh", "ksh")


# A command that starts an SGLang server: `python -m sglang.launch_server ...`, or the console script every wheel
# since 0.5.5 ships, `sglang serve ...` (in /proc: `/venv/bin/python3 /venv/bin/sglang serve ...`).
_SERVER_COMMAND = re.compile(r"sglang\.launch_server\b|(?:^|[\s/'\"=])sglang\s+serve(?:\s|$)")


def is_sglang_command(text):
    """Whether a command line (or a script's, a crontab's line) starts an SGLang server."""
    return bool(_SERVER_COMMAND.search(text))


def is_sglang(proc):
    return is_sglang_command(proc.cmdline)


def is_kin(proc, server):
    """Of the server's kind: titled sglang::, or a multiprocessing helper of the same interpreter; and of the
    server's own making: the server's user, in its session or its cgroup (a child keeps both when it is orphaned).
    Another user's process titled sglang:: is never kin, nor is one of the same user started elsewhere."""
    if proc.uid != server.uid:
        return False
    if proc.sid != server.sid:
        where = _procfs.cgroup(proc.pid)
        if where is None or where != _procfs.cgroup(server.pid):
            return False
    if proc.cmdline.startswith("sglang::"):
        return True
    return proc.exe_name() == server.exe_name() and any(k in proc.cmdline for k in _KIN)


def _channels(pids):
    """The pipes and sockets the processes hold open ({'pipe:[N]', 'socket:[N]'})."""
    return set(t for pid in pids for t in _procfs.open_files(pid).values() if t.startswith(("pipe:", "socket:")))


def claimant(proc, servers, channels=None):
    """The one server (of `servers`, Process objects) a process that left its tree belongs to, or None.

    The strongest tie wins: a pipe or socket it shares with one server's tree (a multiprocessing child keeps its
    end of the resource tracker's pipe), then the same process group, then the same session, then only having
    started after the server (an orphan reparented to PID 1). Among servers tied alike, the latest started before
    the process; a process older than every server of its group or session (left by an earlier run of a wrapper
    loop) goes to the earliest of them. So two servers of one venv, or of one shell session, never both claim a
    process. channels(server) -> the pipes and sockets of its tree (computed when needed)."""
    if channels is not None and len(servers) > 1:
        mine = _channels([proc.pid])
        sharing = [s for s in servers if mine & channels(s)] if mine else []
        if len(sharing) == 1:
            return sharing[0]
    for tie in (lambda s: s.pgid == proc.pgid, lambda s: s.sid == proc.sid):
        tied = [s for s in servers if tie(s)]
        before = [s for s in tied if s.starttime <= proc.starttime]
        if before:
            return max(before, key=lambda s: (s.starttime, s.pid))
        if tied:
            return min(tied, key=lambda s: (s.starttime, s.pid))
    before = [s for s in servers if s.starttime <= proc.starttime]
    return max(before, key=lambda s: (s.starttime, s.pid)) if before else None


def family(server, procs, others=()):
    """The server's processes: itself, its descendants, and kin that left it (same process group or session,
    or orphaned to PID 1 or a subreaper after it started). Never another server's (`others`: their main pids),
    and never a process that another server has a better claim to (claimant())."""
    theirs = set(others) | set(_procfs.descendants(procs, others))
    members = set([server.pid]) | set(_procfs.descendants(procs, [server.pid]))
    servers = [server] + [procs[o] for o in others if o in procs and o != server.pid]
    known = {}

    def channels(s):
        """The pipes and sockets of s's tree, less the trees of servers inside it (a shell that started two)."""
        if s.pid not in known:
            tree = set(_procfs.descendants(procs, [s.pid]))
            nested = [o.pid for o in servers if o.pid in tree]
            tree -= set(nested) | set(_procfs.descendants(procs, nested))
            known[s.pid] = _channels([s.pid] + sorted(tree))
        return known[s.pid]

    for p in procs.values():
        if p.pid in members or p.pid in theirs or p.is_zombie:
            continue
        if is_kin(p, server) and (p.ppid == 1 or p.ppid not in procs or p.pgid == server.pgid) \
                and claimant(p, servers, channels) is server:
            members.add(p.pid)
    return sorted(members)


def family_of(server, procs):
    """family() with every other SGLang server on the host (and its tree) kept out."""
    ours = set([server.pid]) | set(_procfs.descendants(procs, [server.pid]))
    others = [q.pid for q in procs.values() if q.pid not in ours and is_sglang(q)]
    return family(server, procs, others)


SCHEDULER = "sglang::scheduler"


class SchedulerWatch:
    """Tells when the server loses a scheduler (the OOM killer's SIGKILL, say): SGLang before 0.5.15 has no
    liveness watch and then waits for ever (port closed while loading; /health 503 once serving), so nothing else
    would fail. The schedulers are the `sglang::scheduler*` processes of `unit` (a service name), or those below
    `pid` in its process tree; each one seen must stay alive. Only the tree, not family(): a scheduler leaves the tree
    only when the launcher above it ended, which the check on `pid` itself sees; and the kin that family() adopts may
    be another server's (one started from the same shell session, whose schedulers are orphans for the moment between
    its launcher's kill and their own end), whose end is not this server's loss."""

    def __init__(self, unit=None, pid=None):
        self.unit = unit
        self.pid = pid
        self.seen = {}

    def members(self):
        if self.unit:
            procs = _procfs.snapshot(lambda pid, cmdline: cmdline.startswith(SCHEDULER))
            return [p for p in procs.values() if _procfs.unit_of(p.pid) == self.unit]
        procs = _procfs.snapshot()
        server = procs.get(self.pid)
        if server is None:
            return []
        return [procs[q] for q in _procfs.descendants(procs, [server.pid]) if procs[q].cmdline.startswith(SCHEDULER)]

    def problem(self):
        """None while every scheduler seen is alive; else which died."""
        for p in self.members():
            if not p.is_zombie:
                self.seen.setdefault(p.identity, p.cmdline)
        lost = sorted((ident, title) for ident, title in self.seen.items() if not _procfs.is_alive(ident))
        if not lost:
            return None
        return "the server lost %s: %s (killed by a signal, e.g. the OOM killer); it cannot serve" % (
            "a scheduler" if len(lost) == 1 else "%d schedulers" % len(lost),
            ", ".join("%s (pid %d)" % (title, ident[0]) for ident, title in lost))


def shell_script(proc):
    """The script a shell process runs, as an absolute path (a relative one is the shell's working directory's), or
    None when it runs none: its first argument after its options, unless it runs -c (the word after the command is
    only its $0, never run) or reads its commands from stdin (-s)."""
    args, i = proc.argv[1:], 0
    while i < len(args):
        a = args[i]
        if a in ("--", "-"):
            i += 1
            break
        if a.startswith("--"):
            i += 2 if a in ("--rcfile", "--init-file") else 1
            continue
        if a.startswith("-") and len(a) > 1:
            if "c" in a or "s" in a:
                return None
            i += 1 + a.count("o") + a.count("O")  # -o OPTION, -O SHOPT (clustered: -eo pipefail)
            continue
        break
    if i >= len(args) or not args[i]:
        return None
    path = args[i]
    if not os.path.isabs(path):
        try:
            path = os.path.join(os.readlink("/proc/%d/cwd" % proc.pid), path)
        except OSError:
            return None
    return os.path.normpath(path)


def wrapper(server, procs):
    """A supervisor that would start the server again: a shell loop, a script, tmux or screen. None if none.

    A shell loop's `script` is the file its shell runs (shell_script(), not $0 of -c nor any other word of its argv)
    and only when the shell's user owns it: it names the boot lines that run it (boot.launchers). A script of another
    owner is read to tell a loop, never named (`note` says so)."""
    parent = procs.get(server.ppid)
    chain = []
    while parent is not None and parent.pid > 1:
        chain.append(parent)
        parent = procs.get(parent.ppid)
    for p in chain:
        name = os.path.basename(p.argv[0]) if p.argv else p.comm
        if name.startswith(("tmux", "screen")):
            return {"pid": p.pid, "kind": "terminal multiplexer", "cmdline": p.cmdline}
        if name in SHELLS or p.comm in SHELLS:
            text = p.cmdline
            script = shell_script(p)
            notes = []
            if script:
                body, why = _owner.read_text(script, limit=65536, follow=True)  # a FIFO swapped in: no hang
                text += "\n" + (body or "")
                if why:
                    notes.append("its script was not read: " + why)
                    script = None
                else:
                    try:
                        owner = _owner.user_name(os.stat(script).st_uid)
                    except OSError as e:
                        owner = "unknown (%s)" % e.strerror
                    if owner != _owner.user_name(p.uid):
                        notes.append("its script %s is owned by %s, not by %s: no boot line is disabled for it"
                                     % (script, owner, _owner.user_name(p.uid)))
                        script = None
            if is_sglang_command(text) and any(w in text for w in ("while", "until", "for ")):
                found = {"pid": p.pid, "kind": "shell loop", "cmdline": p.cmdline, "script": script,
                         "user": _owner.user_name(p.uid)}
                if notes:
                    found["note"] = "; ".join(notes)
                return found
    return None
