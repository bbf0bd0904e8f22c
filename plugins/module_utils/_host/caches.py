# -*- coding: utf-8 -*-
# Copyright: inferops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The JIT and compile caches an SGLang server fills (Triton, torch inductor, flashinfer, tvm-ffi, DeepGEMM, SGLang's
own, the CUDA driver's): where a server with a given environment, home and user puts them, their size, and the
environment a unit needs so that its server finds the same caches after the cutover and after a boot.

Where each goes when its variable is unset, read from the wheels:
- SGLANG_CACHE_DIR `~/.cache/sglang` (environ.py, every supported version);
- 0.5.23+: `environ.third_party_cache_defaults` sets TRITON_CACHE_DIR, TORCHINDUCTOR_CACHE_DIR, CUDA_CACHE_PATH and
  FLASHINFER_WORKSPACE_BASE under SGLANG_CACHE_DIR (triton, inductor, nv, and the base itself) when unset;
- before: Triton `~/.triton/cache`, torch inductor `/tmp/torchinductor_<user>` (a tmpfs on many hosts: gone at every
  boot), flashinfer `<FLASHINFER_WORKSPACE_BASE or ~>/.cache/flashinfer`, the CUDA driver `~/.nv/ComputeCache`;
- DeepGEMM SGLANG_DG_CACHE_DIR `~/.cache/deep_gemm` (0.5.5-0.5.15), `<SGLANG_CACHE_DIR>/deep_gemm` (0.5.23);
- tvm-ffi TVM_FFI_CACHE_DIR `~/.cache/tvm-ffi` (0.5.15 jit_kernel/utils.py).
`~` is the server's HOME, else its user's passwd entry (a system unit with User= gets HOME from it).

Sizes are read with lstat and listdir only, never following a symlink, and nothing is opened: root reads no file in a
user's tree."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import pwd
import stat

from ansible_collections.inferops.sglang.plugins.module_utils._host.shm import release

REDIRECT = (0, 5, 23)   # the first supported version whose import puts the third-party caches under SGLANG_CACHE_DIR
VOLATILE = ("/tmp", "/var/tmp", "/run", "/dev/shm")
MAX_ENTRIES = 200000    # a size stops counting here (said so)
# each cache: its name and the variable that moves it
CACHES = (("sglang", "SGLANG_CACHE_DIR"), ("triton", "TRITON_CACHE_DIR"), ("inductor", "TORCHINDUCTOR_CACHE_DIR"),
          ("flashinfer", "FLASHINFER_WORKSPACE_BASE"), ("tvm-ffi", "TVM_FFI_CACHE_DIR"),
          ("deep_gemm", "SGLANG_DG_CACHE_DIR"), ("cuda", "CUDA_CACHE_PATH"))
# what the caches' places depend on, of a server's environment
CACHE_VARIABLES = ("HOME",) + tuple(var for name, var in CACHES)


def home_of(user):
    try:
        return pwd.getpwnam(user).pw_dir
    except (KeyError, TypeError):
        return None


def paths(env, home, user, version):
    """{name: (variable, its value for the server, the cache's folder)} for a server with this environment, HOME
    (None: its user's passwd home), user and version."""
    home = env.get("HOME") or home or home_of(user) or "/"

    def expand(p):
        return os.path.join(home, p[2:]) if p == "~" or p.startswith("~/") else p

    v = release(version) or (0, 0, 0)
    redirect = v >= REDIRECT
    base = expand(env.get("SGLANG_CACHE_DIR") or "~/.cache/sglang")
    third = {"TRITON_CACHE_DIR": os.path.join(base, "triton"),
             "TORCHINDUCTOR_CACHE_DIR": os.path.join(base, "inductor"),
             "CUDA_CACHE_PATH": os.path.join(base, "nv"), "FLASHINFER_WORKSPACE_BASE": base} if redirect else {}
    default = {
        "SGLANG_CACHE_DIR": base,
        "TRITON_CACHE_DIR": os.path.join(home, ".triton", "cache"),
        "TORCHINDUCTOR_CACHE_DIR": "/tmp/torchinductor_%s" % user,
        "FLASHINFER_WORKSPACE_BASE": home,
        "TVM_FFI_CACHE_DIR": os.path.join(home, ".cache", "tvm-ffi"),
        "SGLANG_DG_CACHE_DIR": (os.path.join(base, "deep_gemm") if redirect
                                else os.path.join(home, ".cache", "deep_gemm")),
        "CUDA_CACHE_PATH": os.path.join(home, ".nv", "ComputeCache"),
    }
    out = {}
    for name, var in CACHES:
        value = expand(env[var]) if env.get(var) else third.get(var, default[var])
        folder = os.path.join(value, ".cache", "flashinfer") if var == "FLASHINFER_WORKSPACE_BASE" else value
        out[name] = (var, value, folder)
    return out


def volatile(path):
    """Whether a boot (or the unit's stop) loses what is there: under /tmp, /var/tmp, /run, /dev/shm."""
    p = os.path.normpath(path)
    return any(p == v or p.startswith(v + "/") for v in VOLATILE)


def size(folder):
    """(bytes, files, complete) of a folder, lstat and listdir only (no symlink followed, nothing opened); (None,
    0, True) when it is not a folder."""
    try:
        if not stat.S_ISDIR(os.lstat(folder).st_mode):
            return None, 0, True
    except OSError:
        return None, 0, True
    total, files, stack, seen = 0, 0, [folder], 0
    while stack:
        d = stack.pop()
        try:
            names = os.listdir(d)
        except OSError:
            continue
        for n in names:
            seen += 1
            if seen > MAX_ENTRIES:
                return total, files, False
            p = os.path.join(d, n)
            try:
                st = os.lstat(p)
            except OSError:
                continue
            if stat.S_ISDIR(st.st_mode):
                stack.append(p)
            elif stat.S_ISREG(st.st_mode):
                total += st.st_size
                files += 1
    return total, files, True


def owner(path):
    """The uid owning the path or, when it does not exist yet, its nearest existing parent; None if none."""
    p = os.path.normpath(path)
    while True:
        try:
            return os.lstat(p).st_uid
        except OSError:
            parent = os.path.dirname(p)
            if parent == p:
                return None
            p = parent


def report(env, home, user, version):
    """The caches of a running server: [{name, variable, path, set (its variable was set), volatile, bytes, files,
    complete}]."""
    out = []
    for name, (var, value, folder) in sorted(paths(env, home, user, version).items()):
        b, n, complete = size(folder)
        out.append({"name": name, "variable": var, "path": folder, "set": bool(env.get(var)),
                    "volatile": volatile(folder), "bytes": b, "files": n, "complete": complete})
    return out


def unit_environment(env, home, user, version, unit_user):
    """The cache variables the unit sets so its server finds what this server compiled (env, home, user, version:
    the running server's) and keeps it across boots: each cache's path as the server uses it when that survives a
    boot and the unit's user owns it (or the nearest folder above it), else the unit's user's own home default
    (torch inductor's volatile /tmp default becomes ~/.cache/torchinductor). Variables already in env are the
    server's own: kept with their value, so the environment is the same whether it is made from the hand-launched
    server's capture or from the unit's own server later."""
    uid = None
    try:
        uid = pwd.getpwnam(unit_user).pw_uid
        unit_home = pwd.getpwnam(unit_user).pw_dir
    except (KeyError, TypeError):
        return {}
    same = user == unit_user
    mine = paths({}, unit_home, unit_user, version)
    out = {}
    for name, (var, value, folder) in sorted(paths(env, home, user, version).items()):
        if env.get(var):
            out[var] = env[var]  # the server's own: kept as it is, so that a unit made again from its own server's
            continue             # environment (a rerun, a group's rank) gets what it has
        if same and not volatile(folder) and owner(folder) == uid:
            out[var] = value
        elif name == "inductor" and volatile(mine[name][1]):
            out[var] = os.path.join(unit_home, ".cache", "torchinductor")
        else:
            out[var] = mine[name][1]
    return out
