# -*- coding: utf-8 -*-
# Copyright: inferops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The weight files a captured server loads: its --model-path (or --model) folder, relative to its cwd, or the hub
cache snapshot a hub id resolves to under its HF_HUB_CACHE / HF_HOME / HOME; and how they are told in one line."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import pwd
import re

from ansible_collections.inferops.sglang.plugins.module_utils._host.redact import argv_option

# The formats a loader takes, in the order it prefers them: the first one a folder has is what it loads (a hub
# repository often has .safetensors and .bin copies of the same weights). Only the folder's top level: subfolders
# (original/ of Llama's repositories) hold weights for other tools.
FORMATS = ((".safetensors",), (".bin",), (".pt", ".pth"), (".gguf",))
INDEXES = ("model.safetensors.index.json", "pytorch_model.bin.index.json")
_HASH = re.compile(r"[0-9a-f]{40}\Z")


def hub_cache(environ, user=None):
    """The hub cache folder of a process with this environment (huggingface_hub's rules)."""
    for name in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):
        if environ.get(name):
            return environ[name]
    home = environ.get("HF_HOME")
    if not home:
        base = environ.get("XDG_CACHE_HOME")
        if not base:
            user_home = environ.get("HOME")
            if not user_home and user:
                try:
                    user_home = pwd.getpwnam(user).pw_dir
                except KeyError:
                    user_home = None
            base = os.path.join(user_home or os.path.expanduser("~"), ".cache")
        home = os.path.join(base, "huggingface")
    return os.path.join(home, "hub")


def snapshot(cache, repo_id, revision=None):
    """The snapshot folder of repo_id in the hub cache (refs/<revision or main>'s commit), or None."""
    repo = os.path.join(cache, "models--" + repo_id.replace("/", "--"))
    rev = revision or "main"
    if not _HASH.match(rev):
        try:
            with open(os.path.join(repo, "refs", rev)) as f:
                rev = f.read().strip()
        except (OSError, UnicodeDecodeError):
            return None
    path = os.path.join(repo, "snapshots", rev)
    return path if os.path.isdir(path) else None


def weights(folder):
    """The weight files a loader reads from folder (real paths, sorted, each once)."""
    for index in INDEXES:
        try:
            with open(os.path.join(folder, index)) as f:
                names = sorted(set(json.load(f).get("weight_map", {}).values()))
        except (OSError, ValueError, AttributeError):
            continue
        if names:
            return _real(os.path.join(folder, n) for n in names)
    try:
        names = sorted(os.listdir(folder))
    except OSError:
        return []
    for suffixes in FORMATS:
        found = [os.path.join(folder, n) for n in names if n.endswith(suffixes)]
        found = [p for p in found if os.path.isfile(p)]
        if found:
            return _real(found)
    return []


def _real(paths):
    out = []
    for path in paths:
        real = os.path.realpath(path)
        if real not in out and os.path.isfile(real):
            out.append(real)
    return out


def locate(argv, environ, cwd, user=None):
    """{'model', 'path' (the folder or file, or None), 'paths' (the weight files), 'files' (how many), 'bytes',
    'msg' (why none were found)} of a captured command."""
    model = argv_option(argv, "--model-path") or argv_option(argv, "--model")
    out = {"model": model, "path": None, "paths": [], "files": 0, "bytes": 0, "msg": None}
    if not model:
        out["msg"] = "the command names no --model-path"
        return out
    local = os.path.join(cwd or "/", model)
    if os.path.isfile(local):
        out["path"], found = local, _real([local])
    elif os.path.isdir(local):
        out["path"], found = local, weights(local)
    else:
        cache = hub_cache(environ or {}, user)
        out["path"] = snapshot(cache, model, argv_option(argv, "--revision"))
        if not out["path"]:
            out["msg"] = "%s is neither a folder nor in the hub cache %s" % (model, cache)
            return out
        found = weights(out["path"])
    out["paths"], out["files"] = found, len(found)
    out["bytes"] = sum(os.path.getsize(p) for p in found)
    if not found:
        out["msg"] = "no weight files (%s) in %s" % (", ".join(s for f in FORMATS for s in f), out["path"])
    return out


def size(n):
    """Bytes in decimal units, as disks are sold: 712 GB, 1.1 TB."""
    for unit, scale in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            value = n / scale
            return ("%.1f %s" % (value, unit)) if value < 10 else ("%d %s" % (round(value), unit))
    return "%d B" % n


def _pct(part, whole):
    return int(100.0 * part / whole) if whole else 0


def summary(m):
    """One line: 'model: 712 GB in 163 files, 41 % in the page cache, 1.1 TB available[; warmed: ...]'."""
    if not m:
        return "model: not measured"
    if not m.get("files"):
        return "model: %s" % (m.get("msg") or "no weight files found")
    line = "model: %s in %d file%s, %d %% in the page cache, %s available" % (
        size(m["bytes"]), m["files"], "" if m["files"] == 1 else "s", _pct(m.get("resident") or 0, m["bytes"]),
        size(m["available"]) if m.get("available") is not None else "? GB")
    w = m.get("warm")
    if w:
        line += "; warmed before the stop: %s read in %s s (%d readers), %d %% resident after%s%s" % (
            size(w.get("read") or 0), w.get("seconds"), w.get("readers") or 0,
            _pct(w.get("resident_after") or 0, w.get("bytes") or m["bytes"]),
            {"memory": ", stopped at the memory bound", "budget": ", stopped by the time budget"}.get(w.get("stopped"), ""),
            ("; %d errors: %s" % (len(w["errors"]), w["errors"][0])) if w.get("errors") else "")
    elif m.get("warm_skipped"):
        line += "; not warmed: %s" % m["warm_skipped"]
    return line
