# -*- coding: utf-8 -*-
# Copyright: inferops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""NVIDIA devices: who holds the device nodes (from /proc/PID/fd), and nvidia-smi's readings."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import fnmatch
import os
import re
import time

from ansible_collections.inferops.sglang.plugins.module_utils._host import procfs as _procfs
from ansible_collections.inferops.sglang.plugins.module_utils._host.command import CommandError, timed

# /dev/nvidia* misses the caps in their subfolder, which every CUDA process holds too.
DEFAULT_DEVICES = ("/dev/nvidia*", "/dev/nvidia-caps/*")
_GPU_NODE = re.compile(r"nvidia(\d+)$")
SMI_TIMEOUT = 20
# memory.used and the per-process figures may differ by a context's bookkeeping: this much is not waited for
MEMORY_TOLERANCE_MIB = 64


def gpu_of(path):
    """The GPU index of a per-GPU node (/dev/nvidia3 -> 3), or None for shared nodes (ctl, uvm, caps)."""
    m = _GPU_NODE.search(os.path.basename(path))
    return int(m.group(1)) if m else None


class Holder:
    def __init__(self, proc, files):
        self.proc = proc
        self.files = sorted(files)
        self.gpus = sorted(set(g for g in (gpu_of(f) for f in files) if g is not None))

    def as_dict(self, redact=None):
        d = self.proc.as_dict(redact)
        d.update(devices=self.files, gpus=self.gpus)
        return d


def holders(procs, devices=DEFAULT_DEVICES):
    """Every process with an open descriptor on a file matching the device globs: [Holder]."""
    out = []
    for proc in procs.values():
        if proc.is_kernel_thread:
            continue
        files = set()
        for target in _procfs.open_files(proc.pid).values():
            if any(fnmatch.fnmatchcase(target, g) for g in devices):
                files.add(target)
        if files:
            out.append(Holder(proc, files))
    return out


def visible(value, uuids=None):
    """The physical GPU indices a process's CUDA_VISIBLE_DEVICES (value; None when unset) makes its GPUs 0, 1, ...:
    a list (position i: the index of its GPU i), or None when unset (every GPU, in order). GPU UUIDs are mapped
    through uuids ({uuid: index}, nvidia-smi's). ValueError, saying why, for what cannot be mapped (a MIG instance,
    a UUID nvidia-smi does not list). CUDA stops at the first entry it cannot read, as here."""
    if value is None:
        return None
    out = []
    for word in value.split(","):
        word = word.strip()
        if not word:
            break
        if word.isdigit():
            out.append(int(word))
        elif word.startswith("GPU-") and uuids and word in uuids:
            out.append(uuids[word])
        elif word.startswith(("GPU-", "MIG-")):
            raise ValueError("CUDA_VISIBLE_DEVICES=%s names %s, which nvidia-smi does not map to a GPU index here"
                             % (value, word))
        else:
            break
    return out


def on_gpus(smi, pids):
    """The GPUs nvidia-smi lists a CUDA context of one of pids on (a set), or None where it cannot be read."""
    if not smi.available:
        return None
    try:
        return set(a["gpu"] for a in smi.reading()["compute_apps"] if a["pid"] in pids and a["gpu"] is not None)
    except (RuntimeError, OSError, ValueError, KeyError, CommandError):
        return None


class Plan:
    """Which holders a release would stop, and which it must not."""

    def __init__(self):
        self.holders = []      # every Holder
        self.targets = []      # Holders to stop
        self.protected = []    # (Holder, why): protected daemons, never touched
        self.skipped = []      # (Holder, why): init, this process, its ancestors
        self.shared_only = []  # Holders of only ctl/uvm/caps: never targets


def plan(procs, selector, devices=DEFAULT_DEVICES, gpus=None):
    """Targets among the holders: those holding /dev/nvidia<i> for one of gpus (any GPU when None) that
    answer the selector's filters; refusals as the selector decides them."""
    ancestors = set(_procfs.ancestors(selector.me, procs))
    out = Plan()
    out.holders = holders(procs, devices)
    for h in out.holders:
        why = selector.refusal(h.proc, ancestors)
        if why:
            (out.protected if why.startswith("protected") else out.skipped).append((h, why))
        elif h.proc.is_zombie:
            continue
        elif not h.gpus:
            out.shared_only.append(h)
        elif (gpus is None or set(h.gpus) & set(gpus)) and selector.matches(h.proc):
            out.targets.append(h)
    selector.check_count([h.proc for h in out.targets])
    return out


class Smi:
    """nvidia-smi, when it exists, always with a timeout."""

    def __init__(self, run, path=None, timeout=SMI_TIMEOUT):
        self.run = run
        self.path = path or _which("nvidia-smi")
        self.timeout = timeout

    @property
    def available(self):
        return self.path is not None

    def _query(self, what, fields):
        argv = [self.path, "--query-%s=%s" % (what, ",".join(fields)), "--format=csv,noheader,nounits"]
        rc, out, err = timed(self.run, argv, self.timeout)
        if rc != 0:
            raise RuntimeError("nvidia-smi failed (rc %d): %s" % (rc, (err or out).strip()))
        rows = []
        for line in out.splitlines():
            if line.strip():
                rows.append(dict(zip(fields, [c.strip() for c in line.split(",")])))
        return rows

    def uuids(self):
        """{uuid: index} of the GPUs."""
        return dict((r["uuid"], int(r["index"])) for r in self._query("gpu", ["index", "uuid"]))

    def totals(self):
        """{index: memory.total in MiB} of the GPUs."""
        return dict((int(r["index"]), _num(r["memory.total"])) for r in self._query("gpu", ["index", "memory.total"]))

    def reading(self):
        """{'time', 'gpus': [{index, memory_used_mib}], 'compute_apps': [{pid, name, used_memory_mib, gpu}]}.

        A compute app's gpu is the index of the GPU it runs on (None when nvidia-smi names a GPU it did
        not list); its used_memory_mib is None where nvidia-smi cannot tell ([N/A] in some containers).
        """
        rows = self._query("gpu", ["index", "uuid", "memory.used"])
        index = dict((r["uuid"], int(r["index"])) for r in rows)
        gpus = [{"index": int(r["index"]), "memory_used_mib": _num(r["memory.used"])} for r in rows]
        apps = [{"pid": int(r["pid"]), "name": r["process_name"], "used_memory_mib": _num(r["used_memory"]),
                 "gpu": index.get(r["gpu_uuid"])}
                for r in self._query("compute-apps", ["pid", "process_name", "used_memory", "gpu_uuid"])]
        return {"time": time.time(), "gpus": gpus, "compute_apps": apps}


def _by_gpu(reading, keep):
    """MiB that the compute apps answering keep(pid) hold, per GPU index: {index: MiB}."""
    out = dict((g["index"], 0) for g in reading["gpus"])
    for a in reading["compute_apps"]:
        if a["gpu"] in out and keep(a["pid"]):
            out[a["gpu"]] += a["used_memory_mib"] or 0
    return out


def memory_back(smi, before, pids, timeout, interval=0.1, tolerance=MEMORY_TOLERANCE_MIB):
    """Waits until nvidia-smi lists none of `pids` and each GPU's memory.used has dropped by what they held
    in `before` (a reading taken while they still ran): the list empties before the memory comes back.
    What the processes that stay allocate or free meanwhile is counted out, so a busy neighbour neither
    holds the wait up nor ends it early.

    Returns {'complete': bool (False when the timeout came first), 'waited': seconds, 'unlisted': seconds
    until nvidia-smi listed none of them (None if it still does), 'readings': how many were taken, 'after':
    the last reading, 'gpus': [{index, held_mib, dropped_mib, memory_used_mib}] for each GPU where they held
    memory}.
    """
    pids = set(pids)
    held = _by_gpu(before, lambda pid: pid in pids)
    others_before = _by_gpu(before, lambda pid: pid not in pids)
    used_before = dict((g["index"], g["memory_used_mib"] or 0) for g in before["gpus"])
    t0 = time.monotonic()
    unlisted = None
    readings = 0
    while True:
        after = smi.reading()
        readings += 1
        others = _by_gpu(after, lambda pid: pid not in pids)
        rows = []
        for g in after["gpus"]:
            i = g["index"]
            if held.get(i):
                dropped = used_before[i] - (g["memory_used_mib"] or 0) + others[i] - others_before.get(i, 0)
                rows.append({"index": i, "held_mib": held[i], "dropped_mib": dropped,
                             "memory_used_mib": g["memory_used_mib"]})
        listed = pids & set(a["pid"] for a in after["compute_apps"])
        waited = time.monotonic() - t0
        if not listed and unlisted is None:
            unlisted = round(waited, 3)
        complete = not listed and all(r["dropped_mib"] >= r["held_mib"] - tolerance for r in rows)
        if complete or waited >= timeout:
            return {"complete": complete, "waited": round(waited, 3), "unlisted": unlisted, "readings": readings,
                    "after": after, "gpus": rows, "listed": sorted(listed)}
        time.sleep(interval)


def _num(text):
    try:
        return int(float(text))
    except ValueError:
        return None


def _which(name):
    for d in os.environ.get("PATH", "/usr/bin:/bin").split(os.pathsep) + ["/usr/bin", "/usr/local/bin"]:
        p = os.path.join(d, name)
        if os.path.isfile(p) and os.access(p, os.X_OK):
            return p
    return None
