# -*- coding: utf-8 -*-
# Copyright: inferops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What the server's owner controls, and doing things as that owner: root never runs, imports or follows a path a
non-root user can change.

- distrust(path): why a non-root user can change what path is (a component, a folder above one, a link's target),
  or None (trusted).
- Owner: a uid and gid with the user's groups, home and a clean environment; start()/run() a command as them
  (setgroups, setresgid, setresuid: no way back; stdin /dev/null; never a shell; a time limit), call() a function
  in a child that dropped to them.
- open_regular(path, ...): an open that never follows a link at its last component, never blocks on a FIFO and
  refuses anything but a regular file of the expected owner.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import errno
import fcntl
import grp
import json
import os
import pwd
import signal
import stat
import subprocess

from ansible_collections.inferops.sglang.plugins.module_utils._host.command import CommandError

PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
NOBODY = "nobody"
MAX_LINKS = 40  # as the kernel's path walk


class OwnerError(OSError):
    """A file that is not what it must be (a link, a FIFO, another owner's)."""


def user_name(uid):
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return "uid %d" % uid


def _writers(st):
    """Who besides the file's owner may write it ('' when no one)."""
    return " and ".join(w for bit, w in ((stat.S_IWGRP, "its group"), (stat.S_IWOTH, "everyone")) if st.st_mode & bit)


def distrust(path, sticky=False):
    """Why a non-root user can change what `path` is, or None when no one but root can: every component, with each
    symlink resolved (its target's components too), and every folder above each, owned by root and not group- or
    other-writable. A sticky folder writable by others (/tmp) holds only its root-owned entries for root; with
    `sticky`, path may be such a folder itself (for root's own files in it, opened with open_regular)."""
    if not path or not os.path.isabs(path):
        return "%r is not an absolute path" % (path,)
    try:
        st = os.lstat("/")
    except OSError as e:
        return "cannot look at /: %s" % e
    if st.st_uid != 0 or _writers(st):
        return "/ is owned by %s or writable by others" % user_name(st.st_uid)
    pending = [c for c in path.split("/") if c]
    current, parent, links = "/", st, 0
    while pending:
        name = pending.pop(0)
        if name == ".":
            continue
        if name == "..":  # a folder on the way here, checked already
            current = os.path.dirname(current)
            parent = os.lstat(current)
            continue
        here = os.path.join(current, name)
        try:
            st = os.lstat(here)
        except OSError as e:
            return "cannot look at %s: %s" % (here, e.strerror)
        who = _writers(parent)
        if who and not (parent.st_mode & stat.S_ISVTX and st.st_uid == 0 and parent.st_uid == 0):
            return "%s is in %s, which %s can write (owned by %s)" % (here, current, who, user_name(parent.st_uid))
        if parent.st_uid != 0:
            return "%s is in %s, owned by %s" % (here, current, user_name(parent.st_uid))
        if stat.S_ISLNK(st.st_mode):
            links += 1
            if links > MAX_LINKS:
                return "%s: too many levels of symbolic links" % path
            target = os.readlink(here)
            pending = [c for c in target.split("/") if c] + pending
            if target.startswith("/"):
                current, parent = "/", os.lstat("/")
            continue
        if st.st_uid != 0:
            return "%s is owned by %s" % (here, user_name(st.st_uid))
        if not pending and _writers(st) and not (sticky and stat.S_ISDIR(st.st_mode) and st.st_mode & stat.S_ISVTX):
            return "%s can be written by %s" % (here, _writers(st))
        if pending and not stat.S_ISDIR(st.st_mode):
            return "%s is not a folder" % here
        current, parent = here, st
    return None


def trusted(path):
    """Whether no non-root user can change what path is (distrust says why not)."""
    return distrust(path) is None


def open_regular(path, flags=os.O_RDONLY, uid=None, mode=0o600, follow=False):
    """A descriptor of path, a regular file (uid's, when given): never through a link at its last component (unless
    follow: root's own links, /etc/rc.local), never blocking on a FIFO, a device refused. With O_CREAT in flags a
    missing file is created (O_NOFOLLOW: never through a dangling link). OwnerError (an OSError) when it is not such
    a file."""
    nofollow = 0 if follow else os.O_NOFOLLOW
    fd = os.open(path, flags | nofollow | os.O_NONBLOCK | os.O_NOCTTY | getattr(os, "O_CLOEXEC", 0), mode)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise OwnerError(errno.EINVAL, "%s is not a regular file" % path)
        if uid is not None and st.st_uid != uid:
            raise OwnerError(errno.EPERM, "%s is owned by %s, not %s" % (path, user_name(st.st_uid), user_name(uid)))
        fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_regular(path, uid=None, limit=None, follow=False):
    """The bytes of a regular file (uid's, when given), open_regular's way; the last `limit` bytes when given."""
    fd = open_regular(path, os.O_RDONLY, uid, follow=follow)
    with os.fdopen(fd, "rb") as f:
        if limit is not None:
            f.seek(max(0, os.fstat(f.fileno()).st_size - limit))
        return f.read()


class Owner:
    """A user to do things as: uid, gid, the user's own groups (none when the uid has no passwd entry), home."""

    def __init__(self, uid, gid=None):
        self.uid = int(uid)
        try:
            pw = pwd.getpwuid(self.uid)
        except KeyError:
            pw = None
        self.gid = int(gid) if gid is not None else (pw.pw_gid if pw else self.uid)
        self.name = pw.pw_name if pw else None
        self.home = pw.pw_dir if pw else "/"
        self.groups = sorted(set(os.getgrouplist(self.name, self.gid))) if pw else [self.gid]

    @classmethod
    def named(cls, user=None, group=None):
        """The owner a unit's User=/Group= names (numbers too); root when user is empty. KeyError for an unknown."""
        uid = pwd.getpwnam(user).pw_uid if user and not str(user).isdigit() else int(user or 0)
        gid = None
        if group:
            gid = grp.getgrnam(group).gr_gid if not str(group).isdigit() else int(group)
        return cls(uid, gid)

    @classmethod
    def of(cls, path):
        """The owner of path itself (a link's own owner: whoever made it controls it)."""
        st = os.lstat(path)
        return cls(st.st_uid, st.st_gid)

    @property
    def is_root(self):
        return self.uid == 0

    def __str__(self):
        return "%s (uid %d, gid %d)" % (self.name or "uid %d" % self.uid, self.uid, self.gid)

    def environment(self, extra=None):
        """A clean environment: system folders on PATH, the user's HOME, LANG=C.UTF-8; nothing of ours."""
        env = {"PATH": PATH, "HOME": self.home, "LANG": "C.UTF-8"}
        if self.name:
            env.update(USER=self.name, LOGNAME=self.name)
        env.update(extra or {})
        return env

    def drop(self):
        """Become the owner for good (in a child: setgroups, setresgid, setresuid), verified."""
        if os.getuid() == 0:
            os.setgroups(self.groups)
            os.setresgid(self.gid, self.gid, self.gid)
            os.setresuid(self.uid, self.uid, self.uid)
        if os.getresuid() != (self.uid,) * 3 or os.getresgid() != (self.gid,) * 3:
            raise OSError(errno.EPERM, "could not become %s" % self)

    def _check(self):
        if os.getuid() != 0 and (self.uid, self.gid) != (os.getuid(), os.getgid()):
            raise OSError(errno.EPERM, "only root may run a command as %s" % self)

    def start(self, argv, env=None, cwd="/", stdin=None):
        """A command as the owner (Popen, text pipes for stdout and stderr; stdin /dev/null unless given `stdin`,
        then a pipe), in a session of its own, with the clean environment plus env."""
        self._check()
        # the demotion runs in the child between fork and exec: no other thread of ours runs there
        return subprocess.Popen(list(argv), env=self.environment(env), cwd=cwd,  # pylint: disable=ansible-bad-function
                                stdin=subprocess.DEVNULL if stdin is None else subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True,
                                close_fds=True, start_new_session=True, preexec_fn=self.drop)

    def run(self, argv, timeout, env=None, cwd="/", stdin=None):
        """(rc, stdout, stderr) of a command as the owner; CommandError when it outlasts timeout seconds (it and its
        session are killed); (127, '', why) when it cannot be started."""
        try:
            p = self.start(argv, env, cwd, stdin)
        except (OSError, subprocess.SubprocessError) as e:
            return 127, "", "%s cannot be run as %s: %s" % (argv[0], self, e)
        try:
            out, err = p.communicate(stdin, timeout=timeout)
        except subprocess.TimeoutExpired:
            kill(p)
            raise CommandError("%s did not answer within %d s" % (argv[0], timeout))
        return p.returncode, out, err

    def call(self, fn, *args):
        """fn(*args) in a forked child that became the owner; its JSON-able answer, or its exception's text raised
        as an OSError here. For file work in the owner's folders: the owner's permissions, never root's."""
        self._check()
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: never returns
            code = 0
            try:
                os.close(r)
                self.drop()
                out = {"answer": fn(*args)}
            except BaseException as e:  # pylint: disable=broad-except
                out, code = {"error": str(e) or type(e).__name__}, 1
            try:
                with os.fdopen(w, "w") as f:
                    json.dump(out, f)
            finally:
                os._exit(code)  # pylint: disable=protected-access
        os.close(w)
        with os.fdopen(r) as f:
            data = f.read()
        os.waitpid(pid, 0)
        try:
            out = json.loads(data)
        except ValueError:
            out = {"error": "the child that became %s ended without an answer" % self}
        if "error" in out:
            raise OSError(errno.EPERM, out["error"])
        return out["answer"]


def kill(p):
    """A started command and its session, killed and reaped."""
    try:
        os.killpg(p.pid, signal.SIGKILL)
    except OSError:
        pass
    p.communicate()


def read_text(path, limit=None, follow=False):
    """(text, None) of a regular file read open_regular's way (its first `limit` bytes when given), or (None, why):
    not there, not a regular file, binary (a NUL byte) or not UTF-8."""
    try:
        fd = open_regular(path, follow=follow)
        with os.fdopen(fd, "rb") as f:
            data = f.read() if limit is None else f.read(limit)
    except OwnerError as e:
        return None, e.strerror
    except OSError as e:
        return None, "%s: %s" % (path, e.strerror or e)
    if b"\0" in data:
        return None, "%s is a binary file" % path
    try:
        return data.decode("utf-8"), None
    except UnicodeDecodeError:
        return None, "%s is not UTF-8 text" % path
