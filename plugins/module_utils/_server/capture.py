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
from ansible_collections.inferops.sglang.plugins.module_utils._host import (
    files as _files, owner as _owner, procfs as _procfs, venv as _venv)

# The environment's paths root would run or load from: every entry of these (LD_*: every variable of the loader)
SEARCH_PATHS = ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "PYTHONUSERBASE")


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


def _interpreter(script):
    """The absolute interpreter a script's #! line names (not through env), or None."""
    try:
        with open(script, "rb") as f:
            line = f.readline(4096)
    except (IOError, OSError):
        return None
    words = line[2:].decode("utf-8", "replace").split() if line.startswith(b"#!") else []
    return words[0] if words and words[0].startswith("/") else None


def argv0_is_exe(resolved, exe):
    """Whether argv[0], as the shell resolved it, is the program that runs (/proc/PID/exe): the same file, every link
    resolved, or a script whose #! line names it. A process chooses its argv[0] freely (exec -a, a setuid program
    given a file of its caller's as argv[0]): what a unit or a relaunch would run is only what ran when they agree."""
    if not (resolved and exe):
        return False
    real = os.path.realpath(exe[:-len(" (deleted)")] if exe.endswith(" (deleted)") else exe)
    if os.path.realpath(resolved) == real:
        return True
    interpreter = _interpreter(resolved)
    return bool(interpreter) and os.path.realpath(interpreter) == real


def identity_problems(cap, what="the server"):
    """Why the process a capture took is not what its capture says it is (each naming the values): its real,
    effective, saved and filesystem ids differ; its argv[0] is not the program that ran. Old captures without ids are
    judged by argv[0] alone."""
    problems = []
    pid = cap.get("pid")
    if cap.get("ids"):
        why = _procfs.ids_problem(dict((k, tuple(v)) for k, v in cap["ids"].items()), pid)
        if why:
            problems.append("%s (%s)" % (why, what))
    if not cap.get("argv0_matches_exe"):
        problems.append("the argv[0] of %s (pid %s), %s (resolved: %s), is not the program it runs, %s: what it runs "
                        "cannot be told from its command line" % (
                            what, pid, (cap.get("argv") or ["?"])[0], cap.get("argv0_resolved"), cap.get("exe")))
    return problems


def _paths(env):
    """The paths of an environment that root would run or load from: (variable, path) of PYTHONPATH and the others of
    SEARCH_PATHS, and of every LD_* variable (LD_PRELOAD: separated by spaces too). An empty entry is the cwd."""
    out = []
    for name in sorted(env):
        if name in SEARCH_PATHS or name.startswith("LD_"):
            seps = env[name].replace(" ", ":") if name == "LD_PRELOAD" else env[name]
            out.extend((name, p) for p in seps.split(":"))
    return out


def _distrust_missing(path):
    """distrust() of path, or, when it is not there, of the folder it would be made in (the nearest that is): a
    missing path that only root could create is root's."""
    if not path or not os.path.isabs(path):
        return "%r is not an absolute path" % (path,)
    while not os.path.lexists(path) and path != "/":
        path = os.path.dirname(path)
    return _owner.distrust(path)


def gate_python(executable):
    """The interpreter the unit's readiness gate runs with (filter gate_python): the executable when it is a python,
    else the python3 beside it."""
    return executable if os.path.basename(executable).startswith("python") else os.path.join(
        os.path.dirname(executable), "python3")


def root_problems(cap, gate=True):
    """For a capture that would run as root: why another user could change what root would run or read - the
    executable (a python's venv, site-packages and sglang package too), the readiness gate's python, the cwd, and the
    paths of the environment (PYTHONPATH, LD_*, PATH entries before the executable's folder), each naming the path and
    why; [] when only root can."""
    exe = cap.get("argv0_resolved") or cap.get("exe")
    env = cap.get("environment") or {}
    checks = []
    if exe:
        checks.append(("the executable", exe, _venv.distrust if os.path.basename(exe).startswith("python")
                       else _owner.distrust))
        python = gate_python(exe)
        if gate and python != exe and os.path.lexists(python):
            checks.append(("the readiness gate's python", python, _venv.distrust))
    checks.append(("the working directory", cap.get("cwd") or "", _owner.distrust))
    checks.extend(("%s's entry" % name, p or cap.get("cwd") or "", _distrust_missing) for name, p in _paths(env))
    folder = os.path.dirname(exe) if exe else None
    for entry in (env.get("PATH") or "").split(":"):
        entry = os.path.normpath(os.path.join(cap.get("cwd") or "/", entry or "."))
        if entry == folder:
            break
        checks.append(("PATH's entry", entry, _distrust_missing))
    problems, seen = [], set()
    for what, path, judge in checks:
        if (what, path) in seen:
            continue
        seen.add((what, path))
        why = judge(path)
        if why:
            problems.append("%s %s: %s" % (what, path, why))
    return problems


def refusals(cap, user="", group=""):
    """Why a capture (and its wrapper loop's) must not be run again - by a unit made from it or by a rollback's
    relaunch: identity_problems; and, where it would run as root (uid 0) with no user or group given instead,
    root_problems. Each names what it found; [] when none."""
    problems = []
    for what, c in (("the server", cap), ("its wrapper loop", cap.get("wrapper"))):
        if not c:
            continue
        problems += identity_problems(c, what)
        if not (user or group) and c.get("uid", 0) == 0:
            found = root_problems(c, gate=c is cap)
            if found:
                problems.append("%s would run as root, and another user can change what root would run or read: %s. "
                                "Name the user it runs as (cutover_user, cutover_group), or make these root's alone"
                                % (what, "; ".join(found)))
    return problems


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
    ids = _procfs.ids(pid) or {}
    # the real ids: who started it (a setuid program's effective uid is its file's owner's). The gid is the process's
    # own (sudo -g, setpriv), not its user's primary group
    gid = ids["gid"][0] if ids else None
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
        "argv0_matches_exe": argv0_is_exe(resolved, exe),
        "environment": env,
        "cwd": cwd,
        "user": proc.user,
        "uid": proc.uid,
        "gid": gid,
        "ids": dict((k, list(v)) for k, v in ids.items()),
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
