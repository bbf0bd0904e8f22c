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


def family(server, procs, others=()):
    """The server's processes: itself, its descendants, and kin that left it (same process group or session,
    or orphaned to PID 1 or a subreaper after it started). Never another server's (`others`: their main pids)."""
    theirs = set(others) | set(_procfs.descendants(procs, others))
    members = set([server.pid]) | set(_procfs.descendants(procs, [server.pid]))
    for p in procs.values():
        if p.pid in members or p.pid in theirs or p.is_zombie:
            continue
        related = p.pgid == server.pgid or p.sid == server.sid or p.starttime >= server.starttime
        if related and is_kin(p, server) and (p.ppid == 1 or p.ppid not in procs or p.pgid == server.pgid):
            members.add(p.pid)
    return sorted(members)


def family_of(server, procs):
    """family() with every other SGLang server on the host (and its tree) kept out."""
    ours = set([server.pid]) | set(_procfs.descendants(procs, [server.pid]))
    others = [q.pid for q in procs.values() if q.pid not in ours and is_sglang(q)]
    return family(server, procs, others)


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


BOOT_FILES = ("/etc/crontab", "/etc/rc.local")
BOOT_DIRS = ("/etc/cron.d", "/var/spool/cron/crontabs")


def _port_of(text):
    words = text.replace("=", " ").split()
    for i, w in enumerate(words[:-1]):
        if w == "--port":
            return words[i + 1]
    return None


def _lines(files=None):
    """Every line of the boot files: [{path, lineno, line}]."""
    if files is None:
        files = list(BOOT_FILES)
        for d in BOOT_DIRS:
            try:
                files += sorted(os.path.join(d, n) for n in os.listdir(d) if not n.startswith("."))
            except OSError:
                continue
    rows = []
    for path in files:
        try:
            with open(path) as f:
                lines = f.read().splitlines()
        except (OSError, UnicodeDecodeError):
            continue
        rows += [{"path": path, "lineno": n, "line": line} for n, line in enumerate(lines, 1)]
    return rows


def launchers(port, scripts=(), files=None):
    """Lines that would start a server on `port` at boot: @reboot crontab lines and rc.local lines that run
    an SGLang server (`sglang.launch_server`, `sglang serve`; or one of `scripts`, a wrapper's), on this port (a line without --port: 30000).
    [{path, lineno, line}]."""
    found = []
    for row in _lines(files):
        text = row["line"].strip()
        if not text or text.startswith("#"):
            continue
        if "cron" in row["path"] and not text.startswith("@reboot"):
            continue
        server = is_sglang_command(text) and (_port_of(text) or "30000") == str(port)
        if server or any(s and s in text for s in scripts):
            found.append(row)
    return found


DISABLED = "# disabled by inferops.sglang cutover"


def disabled_launchers(service, files=None):
    """Paths holding launcher lines the cutover to `service` disabled (a rollback enables them again)."""
    mark = "%s, %s " % (DISABLED, service)
    return sorted(set(row["path"] for row in _lines(files) if row["line"].startswith(mark)))
