# -*- coding: utf-8 -*-
# Copyright: inferops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What a server runs, as /proc shows it (argv, environment, cwd, user, log files), and its capture file."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import grp
import json
import os
import pwd

from ansible_collections.inferops.sglang.plugins.module_utils import _state_dir
from ansible_collections.inferops.sglang.plugins.module_utils._host import files as _files, procfs as _procfs


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


def _gid(pid):
    """The effective gid of a process (/proc/PID/status), None when it cannot be read."""
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                if line.startswith("Gid:"):
                    return int(line.split()[2])
    except (OSError, ValueError, IndexError):
        pass
    return None


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
    gid = _gid(pid)  # the process's own (sudo -g, setpriv), not its user's primary group
    if gid is None:
        try:
            gid = pwd.getpwuid(proc.uid).pw_gid
        except KeyError:
            gid = None
    try:
        group = grp.getgrgid(gid).gr_name if gid is not None else None
    except KeyError:
        group = str(gid)
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


def capture_file(state_dir, text):
    """capture.json in the port's state folder (0600, the folder 0700), holding text: a capture (a discovery's
    `stored`) as JSON. ValueError when text is not a JSON object (the text, secrets included, is never quoted)."""
    try:
        cap = json.loads(text)
    except ValueError:
        cap = None
    if not isinstance(cap, dict):
        raise ValueError("capture must be a capture as JSON text (sglang_discover's stored, to_json): an object")
    return _files.File(_state_dir.capture(state_dir), json.dumps(cap, indent=2, sort_keys=True), 0o600,
                       dir_mode=0o700)
