# -*- coding: utf-8 -*-
# Copyright: inferops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Finding an SGLang server by its port, its family of processes, and what it runs (from /proc)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import binascii
import grp
import os
import pwd
import re
import socket

from ansible_collections.inferops.sglang.plugins.module_utils import _procfs

LISTEN = "0A"
ESTABLISHED = "01"
_KIN = ("multiprocessing.spawn", "multiprocessing.resource_tracker", "multiprocessing.forkserver")
_SHELLS = ("sh", "bash", "dash", "zsh", "ksh")


def _sockets(port, proc="/proc"):
    """(state, local address in /proc's hex, inode, uid) of each TCP socket whose local port is port (IPv4, IPv6)."""
    for name in ("tcp", "tcp6"):
        try:
            with open("%s/net/%s" % (proc, name)) as f:
                next(f)
                rows = [line.split() for line in f]
        except (OSError, StopIteration):
            continue
        for fields in rows:
            try:
                address, local = fields[1].rsplit(":", 1)
                if int(local, 16) == port:
                    yield fields[3], address, fields[9], int(fields[7])
            except (IndexError, ValueError):
                continue


def listening_inodes(port, proc="/proc"):
    """Socket inodes listening on TCP port (IPv4 and IPv6)."""
    return set(inode for state, address, inode, uid in _sockets(port, proc) if state == LISTEN)


def connections(port, proc="/proc"):
    """How many client connections to port are open (ESTABLISHED on the server's side)."""
    return sum(1 for state, address, inode, uid in _sockets(port, proc) if state == ESTABLISHED)


def local_url(port, proc="/proc"):
    """http://ADDRESS:port of a socket listening on port, a wildcard address read as loopback; None if none."""
    for state, address, inode, uid in _sockets(port, proc):
        if state != LISTEN:
            continue
        raw = binascii.unhexlify(address)
        if len(raw) == 4:
            host = socket.inet_ntop(socket.AF_INET, raw[::-1])
            return "http://%s:%d" % ("127.0.0.1" if host == "0.0.0.0" else host, port)
        # /proc prints an IPv6 address as four host-order 32-bit words
        host = socket.inet_ntop(socket.AF_INET6, b"".join(raw[i:i + 4][::-1] for i in range(0, 16, 4)))
        return "http://[%s]:%d" % ("::1" if host == "::" else host, port)
    return None


def listeners(port, procs):
    """Pids holding a socket that listens on port."""
    want = set("socket:[%s]" % i for i in listening_inodes(port))
    if not want:
        return []
    return sorted(pid for pid in procs if want & set(_procfs.open_files(pid).values()))


def _fds_readable(pid):
    try:
        fds = os.listdir("%s/%d/fd" % (_procfs.PROC, pid))
        if fds:
            os.readlink("%s/%d/fd/%s" % (_procfs.PROC, pid, fds[0]))
        return True
    except OSError:
        return False


def hidden_listeners(port, procs, proc="/proc"):
    """The sockets listening on port that no process this one can inspect holds (another user's process, without
    CAP_SYS_PTRACE over it: a default podman container): [{inode, uid, user, unreadable}], unreadable being the
    pids of the socket's user whose open files cannot be read - who may hold it."""
    held = set()
    for pid in procs:
        held.update(t for t in _procfs.open_files(pid).values() if t.startswith("socket:["))
    out = []
    for state, address, inode, uid in _sockets(port, proc):
        if state != LISTEN or "socket:[%s]" % inode in held or inode == "0":
            continue
        unreadable = sorted(pid for pid, q in procs.items() if q.uid == uid and not _fds_readable(pid))
        out.append(dict(inode=int(inode), uid=uid, user=_procfs.user_name(uid), unreadable=unreadable))
    return out


def hidden_message(port, hidden):
    """What to say of a port in use by sockets no readable process holds."""
    return "port %d is in use, by %s that no process this user can inspect holds (reading a process's open files " \
        "needs CAP_SYS_PTRACE over it, which root lacks in a default container): %s" % (port, (
            "a listening socket" if len(hidden) == 1 else "%d listening sockets" % len(hidden)), "; ".join(
            "inode %d, owned by uid %d (%s)%s" % (h["inode"], h["uid"], h["user"], (
                ", maybe pid %s (that user's processes whose files cannot be read)" % ", ".join(
                    str(x) for x in h["unreadable"][:10])) if h["unreadable"] else "") for h in hidden))


def main_process(pid, procs):
    """The topmost process of the same command line above pid (a listener may be a forked child)."""
    proc = procs[pid]
    while proc.ppid in procs and procs[proc.ppid].cmdline == proc.cmdline:
        proc = procs[proc.ppid]
    return proc


# A command that starts an SGLang server: `python -m sglang.launch_server ...`, or the console script every wheel
# since 0.5.5 ships, `sglang serve ...` (in /proc: `/venv/bin/python3 /venv/bin/sglang serve ...`).
_SERVER_COMMAND = re.compile(r"sglang\.launch_server\b|(?:^|[\s/'\"=])sglang\s+serve(?:\s|$)")


def is_sglang_command(text):
    """Whether a command line (or a script's, a crontab's line) starts an SGLang server."""
    return bool(_SERVER_COMMAND.search(text))


def is_sglang(proc):
    return is_sglang_command(proc.cmdline)


def is_kin(proc, server):
    """Of the server's kind: titled sglang::, or a multiprocessing helper of the same interpreter."""
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


def listener_problem(port, unit=None, pid=None):
    """None when what listens on port is the server being waited for: a process of `unit` (a service name), or of
    the family of `pid`; else what listens instead. A real server whose port is taken keeps loading and its warm-up
    talks to whoever holds the port, so an answer on the port alone proves nothing."""
    procs = _procfs.snapshot()
    pids = listeners(port, procs)
    if not pids:
        return "nothing that can be read listens on port %d" % port
    if unit:
        foreign = [p for p in pids if _procfs.unit_of(p) != unit]
        whose = unit
    else:
        server = procs.get(pid)
        members = set(family_of(server, procs)) if server is not None else set()
        foreign = [p for p in pids if p not in members]
        whose = "pid %s's family" % pid
    if not foreign:
        return None
    return "port %d is held by pid %s (%s), not by %s" % (
        port, foreign[0], procs[foreign[0]].cmdline[:120] if foreign[0] in procs else "?", whose)


SCHEDULER = "sglang::scheduler"


class SchedulerWatch:
    """Tells when the server loses a scheduler (the OOM killer's SIGKILL, say): SGLang before 0.5.15 has no
    liveness watch and then waits for ever (port closed while loading; /health 503 once serving), so nothing else
    would fail. The schedulers are the `sglang::scheduler*` processes of `unit` (a service name), or of the family
    of `pid`; each one seen must stay alive."""

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
        return [procs[q] for q in family_of(server, procs) if procs[q].cmdline.startswith(SCHEDULER)]

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


def wrapper(server, procs):
    """A supervisor that would start the server again: a shell loop, a script, tmux or screen. None if none."""
    parent = procs.get(server.ppid)
    chain = []
    while parent is not None and parent.pid > 1:
        chain.append(parent)
        parent = procs.get(parent.ppid)
    for p in chain:
        name = os.path.basename(p.argv[0]) if p.argv else p.comm
        if name.startswith(("tmux", "screen")):
            return {"pid": p.pid, "kind": "terminal multiplexer", "cmdline": p.cmdline}
        if name in _SHELLS or p.comm in _SHELLS:
            text = p.cmdline
            script = next((a for a in p.argv[1:] if not a.startswith("-") and os.path.isfile(a)), None)
            if script:
                try:
                    with open(script) as f:
                        text += "\n" + f.read(65536)
                except OSError:
                    pass
            if is_sglang_command(text) and any(w in text for w in ("while", "until", "for ")):
                return {"pid": p.pid, "kind": "shell loop", "cmdline": p.cmdline, "script": script}
    return None


def which(name, path, cwd):
    """argv[0] as the shell found it: a name on the captured PATH, or a path relative to the captured cwd."""
    if "/" in name:
        return os.path.normpath(os.path.join(cwd, name))
    for d in (path or "").split(":"):
        candidate = os.path.join(os.path.join(cwd, d) if not d.startswith("/") else d, name)
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return os.path.normpath(candidate)
    return None


def _log_file(pid, fd):
    """Where fd writes, when it is a regular file (a nohup log): else None (a terminal, a pipe, /dev/null)."""
    try:
        target = os.readlink("/proc/%d/fd/%d" % (pid, fd))
    except OSError:
        return None
    return target if target.startswith("/") and os.path.isfile(target) else None


def capture(pid):
    """What the process runs: argv (argv[0] resolved as the shell did), environment, cwd, user, exe, and the
    log files its stdout and stderr write to."""
    proc = _procfs.read(pid)
    if proc is None:
        return None
    env = _procfs.environ(pid)
    try:
        cwd = os.readlink("/proc/%d/cwd" % pid)
        exe = os.readlink("/proc/%d/exe" % pid)
    except OSError:
        cwd, exe = None, None
    resolved = which(proc.argv[0], env.get("PATH"), cwd or "/") if proc.argv else None
    try:
        gid = pwd.getpwuid(proc.uid).pw_gid
        group = grp.getgrgid(gid).gr_name
    except KeyError:
        gid, group = None, None
    return {
        "pid": pid,
        "starttime": proc.starttime,
        "argv": proc.argv,
        "argv0_resolved": resolved,
        "exe": exe,
        "argv0_matches_exe": bool(resolved and exe and os.path.realpath(resolved) == os.path.realpath(exe)),
        "environment": env,
        "cwd": cwd,
        "user": proc.user,
        "uid": proc.uid,
        "gid": gid,
        "group": group,
        "stdout": _log_file(pid, 1),
        "stderr": _log_file(pid, 2),
    }
