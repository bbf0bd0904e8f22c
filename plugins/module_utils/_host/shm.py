# -*- coding: utf-8 -*-
# Copyright: inferops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""SGLang's POSIX shared memory in /dev/shm: what a server left behind (its creator gone, nothing maps or holds it),
found and removed, and what a user's servers have there now.

SGLang ends its trees with SIGKILL, which skips every unlink: the segments stay until the tmpfs is full and the next
scheduler dies of SIGBUS (the 0.5.15 wheel's sglang/srt/utils/stale_shm_cleanup.py). The names each version creates,
read from the wheels (tests/conformance checks them and the double's):
- `multi_tokenizer_args_<pid>` (every supported version; managers/multi_tokenizer_mixin.py), the main process's pid;
- `sgl_shm_<kind>_<pid>_<8 hex>` (0.5.15+; utils/stale_shm_cleanup.py make_shm_name: kinds mm, nodecheck, mq, sync);
- `sglang_loads_<12 hex>_<8 hex>.shm` (0.5.15+; managers/load_snapshot.py shm_path_for of a random instance id),
  never unlinked, one a start, no pid in it.
Python's own nameless `psm_<hex>` segments (a version's SharedMemory(create=True) without a name) are any Python
program's: never touched.

A segment goes only when all of these hold: its name is one the installed version creates; its owner is the given
user; its creator is gone (the pid in its name does not exist, or is a process that started after the segment was
last changed: a reused pid); and no process maps it or holds it open (each process's /proc/PID/maps and fds, compared
by device and inode, so a server in another mount namespace whose /dev/shm is another tmpfs never matches). Where a
process that could reach the segment cannot be looked at (another process of the same user that is not dumpable; any
other user's when the segment's mode lets others open it), it stays.

The unit's ExecStartPre (roles/systemd_unit/files/inferops-sglang-sweep-shm) runs the block between the two marks
below as the unit's user, on the server's interpreter; a unit test checks that both copies are the same text."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import pwd

# --- begin: the sweep, also in roles/systemd_unit/files/inferops-sglang-sweep-shm (the same text) ---
import re
import stat as _stat

SHM_DIR = "/dev/shm"
PROC = "/proc"
# (the first version that creates it, the name's pattern); the pid group is the creator's
NAMES = (
    ((0, 5, 5), r"multi_tokenizer_args_(?P<pid>[0-9]+)"),
    ((0, 5, 15), r"sgl_shm_[a-z0-9]+_(?P<pid>[0-9]+)_[0-9a-f]{8}"),
    ((0, 5, 15), r"sglang_loads_[0-9a-f]{12}_[0-9a-f]{8}\.shm"),
)
SLACK = 2.0  # seconds: the boot time in /proc/stat is whole seconds


def release(version):
    """(0, 5, 15) of "0.5.15", "0.5.15+double", "0.5.15.post1"; None when it is not a version."""
    m = re.match(r"([0-9]+)\.([0-9]+)\.([0-9]+)", version or "")
    return tuple(int(x) for x in m.groups()) if m else None


def patterns(version):
    """The compiled name patterns the version creates (none for a version that cannot be read)."""
    v = release(version)
    return [re.compile(p + r"\Z") for first, p in NAMES if v is not None and v >= first]


def match(name, pats):
    """(True, creator pid or None) when one of the patterns matches the name, else (False, None)."""
    for p in pats:
        m = p.match(name)
        if m:
            pid = m.groupdict().get("pid")
            return True, (int(pid) if pid is not None else None)
    return False, None


def _boot_time(proc):
    try:
        with open(proc + "/stat") as f:
            for line in f:
                if line.startswith("btime "):
                    return float(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return None


def started(pid, proc=PROC):
    """When the process started (seconds since the epoch), or None when it does not exist. 0.0: it exists, its start
    cannot be read."""
    try:
        with open("%s/%d/stat" % (proc, pid), "rb") as f:
            data = f.read().decode("utf-8", "replace")
    except OSError:
        return None
    try:
        fields = data[data.rindex(")") + 2:].split()
        if fields[0] in ("Z", "X"):
            return None  # a zombie: it maps and holds nothing, and will never unlink
        ticks = int(fields[19])
    except (ValueError, IndexError):
        return 0.0
    boot = _boot_time(proc)
    return boot + ticks / float(os.sysconf("SC_CLK_TCK")) if boot is not None else 0.0


def creator_gone(pid, st, proc=PROC):
    """The creator pid is gone: no such process, or one that started after the segment was last changed (the
    creator existed before its segment: that pid was reused). A start that cannot be read: not gone."""
    if pid is None:
        return True
    start = started(pid, proc)
    if start is None:
        return True
    return start > 0 and start > st.st_ctime + SLACK


def could_be_sglang(base):
    """Whether a process whose maps and fds cannot be read could hold an SGLang segment: its command line (readable
    for every process) is a Python's or names sglang. SGLang's segments are held by its own processes, retitled
    `sglang::...` or not; a process that is not dumpable for another reason (sshd's session processes, a setuid
    program: root's, on every host) never opens one."""
    try:
        with open(base + "/cmdline", "rb") as f:
            argv = f.read().split(b"\0")
    except OSError:
        return True
    first = os.path.basename(argv[0]).decode("utf-8", "replace") if argv and argv[0] else ""
    return first.startswith("python") or any(b"sglang" in a for a in argv) or not first


def holders(device, proc=PROC):
    """({(dev, inode) that some process maps or holds open on that device}, {uid of a process that could not be
    looked at and could be SGLang's: uid}). Every process of the host that this one may read (a user: its own)."""
    held, unseen = set(), set()
    try:
        pids = [int(p) for p in os.listdir(proc) if p.isdigit()]
    except OSError:
        return held, unseen
    for pid in pids:
        base = "%s/%d" % (proc, pid)
        try:
            uid = os.stat(base).st_uid
        except OSError:
            continue  # gone
        try:
            with open(base + "/maps") as f:
                for line in f:
                    parts = line.split(None, 5)
                    if len(parts) >= 5 and parts[4] != "0":
                        major, minor = parts[3].split(":")
                        if os.makedev(int(major, 16), int(minor, 16)) == device:
                            held.add((device, int(parts[4])))
            fds = os.listdir(base + "/fd")
        except (OSError, ValueError):
            if os.path.exists(base) and could_be_sglang(base):
                unseen.add(uid)
            continue
        for fd in fds:
            try:
                if not os.readlink("%s/fd/%s" % (base, fd)).startswith("/"):
                    continue  # a socket, a pipe, an anon inode
                s = os.stat("%s/fd/%s" % (base, fd))
            except OSError:
                continue
            if s.st_dev == device:
                held.add((s.st_dev, s.st_ino))
    return held, unseen


def look(version, uid, shm_dir=SHM_DIR, proc=PROC):
    """Every segment of shm_dir the version names and uid owns: [{name, bytes, live, why}]; live: kept (with why),
    else left behind (its creator gone, nothing maps or holds it). Entries not a plain file are skipped."""
    pats = patterns(version)
    try:
        device = os.stat(shm_dir).st_dev
        names = sorted(os.listdir(shm_dir))
    except OSError:
        return []
    mine = []
    for name in names:
        ok, pid = match(name, pats)
        if not ok:
            continue
        try:
            st = os.lstat(os.path.join(shm_dir, name))
        except OSError:
            continue
        if not _stat.S_ISREG(st.st_mode) or st.st_uid != uid:
            continue
        mine.append((name, pid, st))
    if not mine:
        return []
    held, unseen = holders(device, proc)
    out = []
    for name, pid, st in mine:
        why = None
        if (st.st_dev, st.st_ino) in held:
            why = "mapped or open"
        elif not creator_gone(pid, st, proc):
            why = "its creator (pid %d) runs" % pid
        elif uid in unseen or st.st_mode & 0o077 and unseen:
            why = "a process that could hold it cannot be looked at"
        out.append({"name": name, "bytes": st.st_size, "live": why is not None, "why": why,
                    "inode": (st.st_dev, st.st_ino)})
    return out


def sweep(version, uid, shm_dir=SHM_DIR, proc=PROC, dry_run=False):
    """Remove what look() finds left behind: {removed: [names], bytes, kept: count, errors: [..]}. A segment that
    changed since it was looked at (another inode under its name) stays."""
    removed, errors, freed, kept = [], [], 0, 0
    for seg in look(version, uid, shm_dir, proc):
        if seg["live"]:
            kept += 1
            continue
        path = os.path.join(shm_dir, seg["name"])
        try:
            st = os.lstat(path)
            if (st.st_dev, st.st_ino) != seg["inode"]:
                kept += 1
                continue
            if not dry_run:
                os.unlink(path)
        except OSError as e:
            if getattr(e, "errno", None) != 2:
                errors.append("%s: %s" % (seg["name"], e))
            continue
        removed.append(seg["name"])
        freed += seg["bytes"]
    return {"removed": removed, "bytes": freed, "kept": kept, "errors": errors}
# --- end: the sweep ---


def uid_of(user):
    """A user's uid from a name (or a number), None when unknown."""
    if user is None:
        return None
    try:
        return pwd.getpwnam(str(user)).pw_uid
    except KeyError:
        return int(user) if str(user).isdigit() else None


def every_version():
    """A version whose names are those of every supported version (the newest first release in NAMES)."""
    return ".".join(str(x) for x in max(first for first, dummy in NAMES))


def after_stop(family, shm_dir=None):
    """The switch's sweep once the old family is gone: the segments its users own that every supported version names
    (the family may have run another version than the one installed now), left behind. Never raises: a failed sweep
    is said in the result, and the unit's own sweep runs at its start."""
    out = {"removed": 0, "bytes": 0, "kept": 0, "errors": []}
    for uid in sorted(set(u for u in (uid_of(f.get("user")) for f in family) if u is not None)):
        try:
            r = sweep(every_version(), uid, shm_dir or SHM_DIR)
        except Exception as e:  # pylint: disable=broad-except
            out["errors"].append("%s: %s" % (type(e).__name__, e))
            continue
        out["removed"] += len(r["removed"])
        out["bytes"] += r["bytes"]
        out["kept"] += r["kept"]
        out["errors"] += r["errors"]
    return out


def usage(version, user, shm_dir=SHM_DIR):
    """What `status` shows of /dev/shm: the user's segments of the version's names (count, bytes, how many of them
    are left behind and would go at the unit's next start) and the tmpfs's size and free bytes."""
    uid = uid_of(user)
    segs = look(version or every_version(), uid, shm_dir) if uid is not None else []
    out = {"dir": shm_dir, "user": user, "segments": len(segs), "bytes": sum(s["bytes"] for s in segs),
           "left_behind": len([s for s in segs if not s["live"]]),
           "left_behind_bytes": sum(s["bytes"] for s in segs if not s["live"])}
    try:
        vfs = os.statvfs(shm_dir)
        out.update(size_bytes=vfs.f_blocks * vfs.f_frsize, free_bytes=vfs.f_bavail * vfs.f_frsize)
    except OSError:
        out.update(size_bytes=None, free_bytes=None)
    out["summary"] = "%d segment(s) of %s, %d bytes (%d left behind by a server that is gone, %d bytes); %s free" % (
        out["segments"], user, out["bytes"], out["left_behind"], out["left_behind_bytes"],
        "%d bytes" % out["free_bytes"] if out["free_bytes"] is not None else "? bytes")
    return out
