# -*- coding: utf-8 -*-
# Copyright: inferops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Reading /proc: processes, their identity, ancestry, trees and open files. Standard library only."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import pwd

PROC = "/proc"
PF_KTHREAD = 0x00200000


class Process:
    """One process as /proc shows it. Identity is (pid, starttime): a reused pid has another start time."""

    __slots__ = ("pid", "ppid", "pgid", "sid", "state", "starttime", "flags", "comm", "argv", "uid")

    def __init__(self, pid, ppid, pgid, sid, state, starttime, flags, comm, argv, uid):
        self.pid = pid
        self.ppid = ppid
        self.pgid = pgid
        self.sid = sid
        self.state = state
        self.starttime = starttime
        self.flags = flags
        self.comm = comm
        self.argv = argv
        self.uid = uid

    @property
    def cmdline(self):
        return " ".join(self.argv)

    @property
    def identity(self):
        return (self.pid, self.starttime)

    @property
    def is_kernel_thread(self):
        return bool(self.flags & PF_KTHREAD) or self.pid == 2 or self.ppid == 2

    @property
    def is_zombie(self):
        return self.state in ("Z", "X")

    @property
    def user(self):
        return user_name(self.uid)

    def exe_name(self):
        """Basename of the executable (empty when unreadable: a zombie, a kernel thread)."""
        try:
            return os.path.basename(os.readlink("%s/%d/exe" % (PROC, self.pid))).replace(" (deleted)", "")
        except OSError:
            return ""

    def names(self):
        """The names protection is decided on: the executable's basename and argv[0]'s basename.

        comm is cut at 15 characters (nvidia-persiste), so it is not used.
        """
        names = set()
        exe = self.exe_name()
        if exe:
            names.add(exe)
        if self.argv:
            arg0 = os.path.basename(self.argv[0].split(" ")[0])
            if arg0:
                names.add(arg0.rstrip(":"))
        return names

    def as_dict(self, redact=None):
        cmd = self.cmdline
        return {
            "pid": self.pid,
            "ppid": self.ppid,
            "pgid": self.pgid,
            "user": self.user,
            "state": self.state,
            "comm": self.comm,
            "cmdline": redact(cmd) if redact else cmd,
        }


_USERS = {}


def user_name(uid):
    if uid not in _USERS:
        try:
            _USERS[uid] = pwd.getpwuid(uid).pw_name
        except KeyError:
            _USERS[uid] = str(uid)
    return _USERS[uid]


def _read(path, mode="rb"):
    with open(path, mode) as f:
        return f.read()


def parse_stat(data):
    """(comm, fields after comm) from the bytes of /proc/PID/stat; comm may hold spaces and parentheses."""
    text = data.decode("utf-8", "replace")
    lpar, rpar = text.index("("), text.rindex(")")
    return text[lpar + 1:rpar], text[rpar + 2:].split()


def parse_ids(data):
    """{"uid": (real, effective, saved, filesystem), "gid": (...)} from the bytes of a /proc/PID/status.
    ValueError when either line is missing or malformed."""
    out = {}
    for line in data.decode("utf-8", "replace").splitlines():
        for key, name in (("Uid:", "uid"), ("Gid:", "gid")):
            if line.startswith(key):
                out[name] = tuple(int(x) for x in line.split()[1:5])
    if set(out) != {"uid", "gid"} or any(len(v) != 4 for v in out.values()):
        raise ValueError("no Uid: and Gid: lines of four ids")
    return out


def ids(pid, status=None):
    """The process's ids (parse_ids) read from status (default: /proc/PID/status), or None when it is gone."""
    try:
        return parse_ids(_read(status or "%s/%d/status" % (PROC, pid)))
    except (OSError, ValueError):
        return None


def ids_problem(found, pid=None):
    """Why ids (parse_ids, None: unreadable) are no single identity: real, effective, saved and filesystem uid, or
    gid, that differ (a setuid or setgid program: who it runs as is not who started it), naming them; or None."""
    who = "pid %s" % pid if pid is not None else "the process"
    if found is None:
        return "the ids of %s cannot be read (/proc/%s/status)" % (who, pid)
    for name in ("uid", "gid"):
        if len(set(found[name])) != 1:
            return ("%s runs with differing ids: %s real %d, effective %d, saved %d, filesystem %d (a setuid or setgid "
                    "program: who it runs as is not who started it)" % ((who, name) + tuple(found[name])))
    return None


def _argv(raw):
    # A retitled process (setproctitle) pads its title with NULs: drop the trailing ones.
    raw = raw.rstrip(b"\0")
    return [a.decode("utf-8", "replace") for a in raw.split(b"\0")] if raw else []


def read(pid, raw_cmdline=None):
    """The Process with this pid, or None when it is gone."""
    base = "%s/%d" % (PROC, pid)
    try:
        comm, f = parse_stat(_read(base + "/stat"))
        raw = _read(base + "/cmdline") if raw_cmdline is None else raw_cmdline
        uid = parse_ids(_read(base + "/status"))["uid"][0]  # the real uid: who started it (not a setuid's effective)
    except (OSError, ValueError, IndexError, KeyError):
        return None
    return Process(pid, int(f[1]), int(f[2]), int(f[3]), f[0], int(f[19]), int(f[6]), comm, _argv(raw), uid)


def pids():
    return [int(d) for d in os.listdir(PROC) if d.isdigit()]


def snapshot(wanted=None):
    """Every process now: {pid: Process}.

    wanted(pid, cmdline) -> bool, when given, is asked first from the command line alone (one read a
    process), and only the processes it wants are read whole: a scan for a pattern among 10,000
    processes then costs one read of each command line.
    """
    out = {}
    for pid in pids():
        raw = None
        if wanted is not None:
            try:
                raw = _read("%s/%d/cmdline" % (PROC, pid))
            except OSError:
                continue
            if not wanted(pid, " ".join(_argv(raw))):
                continue
        p = read(pid, raw)
        if p is not None:
            out[pid] = p
    return out


def starttime(pid):
    """The start time of pid, or None when it is gone."""
    try:
        return int(parse_stat(_read("%s/%d/stat" % (PROC, pid)))[1][19])
    except (OSError, ValueError, IndexError):
        return None


def state(pid):
    try:
        return parse_stat(_read("%s/%d/stat" % (PROC, pid)))[1][0]
    except (OSError, ValueError, IndexError):
        return None


def is_alive(identity):
    """True while the process with this (pid, starttime) exists and is not a zombie."""
    pid, start = identity
    try:
        f = parse_stat(_read("%s/%d/stat" % (PROC, pid)))[1]
    except (OSError, ValueError, IndexError):
        return False
    return int(f[19]) == start and f[0] not in ("Z", "X")


def process_alive(pid, start):
    """A wait's check (model_wait's, sglang_switch's): None while the process (pid, its start time) runs."""
    return lambda: None if start is not None and is_alive((pid, start)) else "pid %s exited" % pid


def ancestors(pid=None, procs=None):
    """pid (default: this process) and every ancestor of it, up to PID 1."""
    pid = os.getpid() if pid is None else pid
    chain = []
    seen = set()
    while pid and pid not in seen:
        seen.add(pid)
        chain.append(pid)
        p = procs.get(pid) if procs is not None else None
        if p is None:
            p = read(pid)
        if p is None:
            break
        pid = p.ppid
    return chain


def children_map(procs):
    kids = {}
    for p in procs.values():
        kids.setdefault(p.ppid, []).append(p.pid)
    return kids


def descendants(procs, roots):
    """Every descendant of the root pids (not the roots themselves), in the snapshot procs."""
    kids = children_map(procs)
    out, stack, seen = [], list(roots), set(roots)
    while stack:
        for child in kids.get(stack.pop(), ()):
            if child not in seen:
                seen.add(child)
                out.append(child)
                stack.append(child)
    return out


def open_files(pid):
    """{fd: target} of the process's open file descriptors (empty when not readable)."""
    base = "%s/%d/fd" % (PROC, pid)
    out = {}
    try:
        fds = os.listdir(base)
    except OSError:
        return out
    for fd in fds:
        try:
            out[int(fd)] = os.readlink(base + "/" + fd)
        except OSError:
            continue
    return out


def environ(pid):
    """The process's environment as a dict (empty when not readable)."""
    try:
        raw = _read("%s/%d/environ" % (PROC, pid))
    except OSError:
        return {}
    env = {}
    for item in raw.split(b"\0"):
        if b"=" in item:
            k, v = item.split(b"=", 1)
            env[k.decode("utf-8", "replace")] = v.decode("utf-8", "replace")
    return env


def cgroup(pid, proc=None):
    """The process's path in the hierarchy systemd tracks units in (see cgroup_path), or None when it is gone."""
    try:
        with open("%s/%d/cgroup" % (proc or PROC, pid)) as f:
            return cgroup_path(f.read())
    except (OSError, ValueError):
        return None


def cgroup_path(text):
    """The path of a /proc/PID/cgroup text in the hierarchy systemd tracks units in: the name=systemd line on a hybrid
    host (systemd's own there), else the unified one (0::); None when it has neither."""
    paths = {}
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) == 3 and (parts[0] == "0" or "name=systemd" in parts[1].split(",")):
            paths.setdefault("systemd" if parts[0] != "0" else "unified", parts[2])
    return paths.get("systemd", paths.get("unified"))


def unit_of(pid, suffix=".service", proc=None):
    """The unit of the system's service manager that the process runs in (a *suffix unit: ".service", ".scope"), or
    None: see systemd_unit. PID 1's cgroup is the manager's root (a container's, on a host without a cgroup
    namespace)."""
    path = cgroup(pid, proc)
    return systemd_unit(path, suffix, cgroup(1, proc) or "/") if path is not None else None


def systemd_unit(path, suffix, root="/"):
    """The unit a cgroup path is in, as the system's service manager attributes it: below its root (PID 1's cgroup,
    less /init.scope), the first component that is not a slice - a *suffix unit, or None.

    A cgroup below a unit is that unit's: a user's manager runs in user@UID.service, so a process of a user's own
    `.../user@1000.service/app.slice/sglang-30000.service` is in user@1000.service, never in sglang-30000.service
    (the last component of its path: a name any user with a manager can pick)."""
    if root.endswith("/init.scope"):
        root = root[:-len("/init.scope")]
    root = root.rstrip("/")
    if path != root and not path.startswith(root + "/"):
        return None
    for part in path[len(root):].split("/"):
        if part and not part.endswith(".slice"):
            return part if part.endswith(suffix) else None
    return None
