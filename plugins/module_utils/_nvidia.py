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

from ansible_collections.inferops.sglang.plugins.module_utils import _procfs
from ansible_collections.inferops.sglang.plugins.module_utils._command import timed

# /dev/nvidia* misses the caps in their subfolder, which every CUDA process holds too.
DEFAULT_DEVICES = ("/dev/nvidia*", "/dev/nvidia-caps/*")
_GPU_NODE = re.compile(r"nvidia(\d+)$")
SMI_TIMEOUT = 20


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

    def reading(self):
        """{'time', 'gpus': [{index, memory_used_mib}], 'compute_apps': [{pid, name, used_memory_mib}]}."""
        gpus = [{"index": int(r["index"]), "memory_used_mib": _num(r["memory.used"])}
                for r in self._query("gpu", ["index", "memory.used"])]
        apps = [{"pid": int(r["pid"]), "name": r["process_name"], "used_memory_mib": _num(r["used_memory"])}
                for r in self._query("compute-apps", ["pid", "process_name", "used_memory"])]
        return {"time": time.time(), "gpus": gpus, "compute_apps": apps}


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
