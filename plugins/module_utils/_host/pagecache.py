# -*- coding: utf-8 -*-
# Copyright: inferops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""How much of some files the page cache holds (mincore(2) on a read-only mapping, through ctypes), MemAvailable,
and warming: reading what is not resident, within a memory bound and a time budget, never raising."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import ctypes
import ctypes.util
import os
import threading
import time

PAGE = os.sysconf("SC_PAGE_SIZE")
MAP_SPAN = 1 << 30    # one mapping at a time covers at most this much of a file (page-aligned)
WINDOW = 64 << 20     # the warm's unit of work: a window of a file, read only when not all resident
BLOCK = 8 << 20       # one read
READERS = 4           # concurrent readers (several requests in flight are faster on SSDs and network storage)
GIB = 1 << 30

_PROT_READ, _MAP_SHARED = 1, 1
_MAP_FAILED = ctypes.c_void_p(-1).value
_LOW_BIT = bytes(b & 1 for b in range(256))  # mincore's vector: the low bit of each byte says resident


def _libc():
    libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
    mmap = getattr(libc, "mmap64", libc.mmap)
    mmap.restype = ctypes.c_void_p
    mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_int64]
    libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.POINTER(ctypes.c_ubyte)]
    return libc, mmap


_LIBC = []


def _mincore(fd, offset, length):
    """The residency vector (bytes of 0 or 1, one per page) of length bytes of fd from offset (page-aligned)."""
    if not _LIBC:
        _LIBC.append(_libc())
    libc, mmap = _LIBC[0]
    addr = mmap(None, length, _PROT_READ, _MAP_SHARED, fd, offset)
    if addr in (None, _MAP_FAILED):
        err = ctypes.get_errno()
        raise OSError(err, "mmap: " + os.strerror(err))
    try:
        pages = (length + PAGE - 1) // PAGE
        vec = (ctypes.c_ubyte * pages)()
        if libc.mincore(addr, length, vec) != 0:
            err = ctypes.get_errno()
            raise OSError(err, "mincore: " + os.strerror(err))
        return bytes(vec).translate(_LOW_BIT)
    finally:
        libc.munmap(addr, length)


def pages(path):
    """(size, vector of 0/1 per page) of a file; its mappings are MAP_SPAN at most."""
    fd = os.open(path, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        parts = [_mincore(fd, off, min(MAP_SPAN, size - off)) for off in range(0, size, MAP_SPAN)]
        return size, b"".join(parts)
    finally:
        os.close(fd)


def _cached(size, vec):
    """Bytes in the page cache of a file of this size and page vector."""
    return min(size, vec.count(b"\x01") * PAGE)


def resident(path):
    """(size, bytes of it in the page cache) of one file."""
    size, vec = pages(path)
    return size, _cached(size, vec)


def _readable(paths, errors):
    """(path, size, page vector) of each file that can be read; why the others cannot goes to errors."""
    for path in paths:
        try:
            size, vec = pages(path)
        except (OSError, ValueError) as e:
            errors.append("%s: %s" % (path, e))
            continue
        yield path, size, vec


def residency(paths):
    """{'bytes', 'resident', 'errors'} of files (a file that cannot be read is an error, counted as not resident)."""
    total = held = 0
    errors = []
    for dummy, size, vec in _readable(paths, errors):
        total += size
        held += _cached(size, vec)
    return {"bytes": total, "resident": held, "errors": errors}


def mem_available(meminfo="/proc/meminfo"):
    """MemAvailable in bytes, or None when the kernel does not say."""
    try:
        with open(meminfo) as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def _scan(paths, errors):
    """[(path, size, resident bytes, [missing bytes of each WINDOW])] of the files that can be read."""
    per = WINDOW // PAGE
    out = []
    for path, size, vec in _readable(paths, errors):
        missing = [min(WINDOW, size - i * PAGE, (len(vec[i:i + per]) - vec[i:i + per].count(b"\x01")) * PAGE)
                   for i in range(0, len(vec), per)]
        out.append((path, size, size - sum(missing), missing))
    return out


def warm(paths, margin, budget, readers=READERS, progress=None, every=5.0):
    """Read the parts of the files the page cache lacks, in order, with readers threads; never raises.

    At most MemAvailable - margin - what of the files is resident already is read (the cache's own pages count
    as available: the files must fit as a whole), and nothing is started once `budget` seconds have passed.
    progress(dict), when given, is called every `every` seconds with what was read so far. Returns
    {'bytes', 'resident_before', 'resident_after', 'available', 'allowance', 'read', 'seconds', 'readers',
    'stopped' (None, 'memory' or 'budget'), 'errors'}."""
    t0 = time.monotonic()
    out = {"read": 0, "seconds": 0.0, "readers": readers, "stopped": None, "errors": []}
    try:
        _warm(list(paths), margin, budget, readers, progress, every, t0, out)
    # a warm that fails must not fail what called it
    except Exception as e:  # pylint: disable=broad-except
        out["errors"].append("%s: %s" % (type(e).__name__, e))
    out["seconds"] = round(time.monotonic() - t0, 3)
    return out


def _warm(paths, margin, budget, readers, progress, every, t0, out):
    files = _scan(paths, out["errors"])
    held = sum(f[2] for f in files)
    out.update(bytes=sum(f[1] for f in files), resident_before=held, resident_after=held)
    avail = mem_available()
    out["available"] = avail
    allowance = max(0, (avail or 0) - int(margin) - held)
    out["allowance"] = allowance
    deadline = t0 + budget
    planned = []
    left = allowance
    windows = ((path, i * WINDOW, min(WINDOW, size - i * WINDOW), miss)
               for path, size, dummy, missing in files for i, miss in enumerate(missing) if miss)
    for path, offset, length, missing in windows:
        if missing > left:
            out["stopped"] = "memory"
            if left >= BLOCK:  # read as much of this window as still fits
                planned.append((path, offset, left))
            break
        planned.append((path, offset, length))
        left -= missing
    lock = threading.Lock()
    state = {"next": 0, "read": 0}

    def take():
        with lock:
            if state["next"] >= len(planned):
                return None
            item = planned[state["next"]]
            state["next"] += 1
            return item

    def reader():
        handles = {}
        view = memoryview(bytearray(BLOCK))
        try:
            while True:
                item = take()
                if item is None:
                    return
                path, offset, length = item
                try:
                    done = time.monotonic() < deadline and _read(handles, path, offset, length, view, deadline, lock, state)
                except (OSError, ValueError) as e:
                    with lock:
                        out["errors"].append("%s: %s" % (path, e))
                    continue
                if not done:
                    with lock:
                        out["stopped"] = "budget"
                    return
        finally:
            for f in handles.values():
                f.close()

    threads = [threading.Thread(target=reader) for dummy in range(max(1, min(readers, len(planned))))] if planned else []
    for t in threads:
        t.daemon = True
        t.start()
    for t in threads:
        while t.is_alive():
            t.join(every)
            if progress is not None and t.is_alive():
                progress({"read": state["read"], "planned": sum(p[2] for p in planned),
                          "seconds": round(time.monotonic() - t0, 1)})
    out["read"] = state["read"]
    out["resident_after"] = residency([f[0] for f in files])["resident"]


def _read(files, path, offset, length, view, deadline, lock, state):
    """Read length bytes of path from offset; False when the budget ran out first."""
    f = files.get(path)
    if f is None:
        f = files[path] = open(path, "rb", buffering=0)
        os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_SEQUENTIAL)
    os.posix_fadvise(f.fileno(), offset, length, os.POSIX_FADV_WILLNEED)
    f.seek(offset)
    done = 0
    while done < length:
        if time.monotonic() >= deadline:
            break
        n = f.readinto(view[:min(BLOCK, length - done)])
        if not n:
            length = done  # the file is shorter now
            break
        done += n
        with lock:
            state["read"] += n
    return done >= length
