# -*- coding: utf-8 -*-
# Copyright: inferops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The system units that could serve a port: every service whose ExecStart, as its file and its drop-ins leave it,
runs SGLang on the port, or whose main process is the server; what each is (enabled, running, holding the listener);
their takeover (backed up into the port's state folder, disabled, stopped) and its undoing."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import re
import shlex
import stat
import time

from ansible_collections.inferops.sglang.plugins.module_utils import _state_dir
from ansible_collections.inferops.sglang.plugins.module_utils._host import (
    files as _files, procfs as _procfs, systemd as _systemd)
from ansible_collections.inferops.sglang.plugins.module_utils._host.command import CommandError
from ansible_collections.inferops.sglang.plugins.module_utils._host.redact import DEFAULT_PORT, argv_option
from ansible_collections.inferops.sglang.plugins.module_utils._server import family as _family

# Where system units live, in systemd's order of precedence: a unit's file is the first folder's that has one; the
# drop-ins (NAME.service.d/*.conf) of every folder apply, in the order of their file names.
UNIT_DIRS = ("/etc/systemd/system", "/run/systemd/system", "/usr/local/lib/systemd/system", "/lib/systemd/system",
             "/usr/lib/systemd/system")
# The unit template (roles/systemd_unit/templates/unit.service.j2) writes this at its top: a file of the managed
# unit's name without it is the operator's own.
MANAGED_MARK = "inferops.sglang.systemd_unit"
ENABLED = ("enabled", "enabled-runtime")
RUNNING = ("active", "activating", "reloading")
_PROPERTIES = ("Id", "LoadState", "UnitFileState", "ActiveState", "MainPID", "FragmentPath", "DropInPaths")
_READ_LIMIT = 1 << 20


def read_text(path):
    """A unit file's text: a regular file only (a FIFO or a device is never waited on), '' when unreadable."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError:
        return ""
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return ""
        return os.read(fd, _READ_LIMIT).decode("utf-8", "replace")
    except OSError:
        return ""
    finally:
        os.close(fd)


def unit_files(dirs=None):
    """{service: (its file, [its drop-ins])} of the services found in dirs. A link to /dev/null masks a unit (left
    out); a link to a file of another name is an alias (the unit is found under its own name); templates are left
    out. A drop-in of an earlier folder hides one of the same file name in a later folder."""
    fragments, masked, dropins, seen = {}, set(), {}, set()
    for folder in dirs or UNIT_DIRS:
        real = os.path.realpath(folder)
        if real in seen:
            continue
        seen.add(real)
        try:
            names = sorted(os.listdir(folder))
        except OSError:
            continue
        for name in names:
            path = os.path.join(folder, name)
            if "@" in name:
                continue
            if name.endswith(".service") and name not in fragments and name not in masked:
                target = os.path.realpath(path)
                if target == "/dev/null":
                    masked.add(name)
                elif os.path.basename(target) == name and os.path.isfile(target):
                    fragments[name] = path
            elif name.endswith(".service.d") and os.path.isdir(path):
                mine = dropins.setdefault(name[:-2], {})
                for conf in sorted(os.listdir(path)):
                    if conf.endswith(".conf"):
                        mine.setdefault(conf, os.path.join(path, conf))
    return dict((name, (path, [d for dummy, d in sorted(dropins.get(name, {}).items())]))
                for name, path in fragments.items())


def parse(text):
    """[(section, key, value)] of a unit file's text: comments and blank lines left out, continued lines joined."""
    out, section, pending = [], None, None
    for raw in text.splitlines():
        line = raw.strip()
        if pending is not None:
            if line.startswith(("#", ";")):
                continue
            line = pending + " " + line
            pending = None
        elif not line or line.startswith(("#", ";")):
            continue
        if line.endswith("\\"):
            pending = line[:-1].rstrip()
            continue
        if line.startswith("[") and line.endswith("]"):
            section = line[1:-1]
        elif "=" in line:
            key, dummy, value = line.partition("=")
            out.append((section, key.strip(), value.strip()))
    if pending is not None and "=" in pending:
        key, dummy, value = pending.partition("=")
        out.append((section, key.strip(), value.strip()))
    return out


def _words(value):
    try:
        return shlex.split(value)
    except ValueError:
        return value.split()


def exec_starts(texts):
    """The argv of each ExecStart= that a unit's texts (its file, then its drop-ins) leave (an empty one resets the
    list), its special prefixes dropped and $NAME and ${NAME} replaced from its Environment= settings."""
    commands, env = [], {}
    for text in texts:
        for section, key, value in parse(text):
            if section != "Service":
                continue
            if key == "ExecStart":
                commands = commands + [value] if value else []
            elif key == "Environment":
                if not value:
                    env = {}
                for word in _words(value):
                    name, eq, val = word.partition("=")
                    if eq:
                        env[name] = val
    out = []
    for value in commands:
        value = value.lstrip("@-:+!")
        value = re.sub(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}|\$([A-Za-z_][A-Za-z0-9_]*)\b",
                       lambda m: env.get(m.group(1) or m.group(2), m.group(0)), value)
        out.append(_words(value))
    return out


def port_of(argv):
    """The port an SGLang command line serves (argparse's last --port, SGLang's default without one); None when it
    is not a number (a variable the unit's file does not set)."""
    value = argv_option(argv, "--port", str(DEFAULT_PORT))
    return int(value) if value.isdigit() else None


def serves(argv, port):
    """Whether the command line runs an SGLang server on port."""
    return _family.is_sglang_command(" ".join(argv)) and port_of(argv) == port


def find(port, run, managed=None, server_pid=None, redact=None, dirs=None):
    """Every system service that could serve port: its ExecStart runs SGLang on the port, or its main process is the
    server (server_pid, the listener's main process). managed: the managed service's name (NAME.service). Each is a
    dict: unit, path, dropins, files, exec_start (masked by redact), unit_file_state, active_state, main_pid,
    holds_port (the server runs in it), managed, ours (the managed name, written by the unit template), fights
    (enabled or running), summary. Sorted by name; states are None where systemctl cannot tell."""
    redact = redact or (lambda text: text)
    found, texts = {}, {}
    for name, (path, dropins) in unit_files(dirs).items():
        parts = [read_text(p) for p in [path] + dropins]
        if not any("sglang" in t for t in parts):
            continue
        commands = [c for c in exec_starts(parts) if serves(c, port)]
        if commands:
            found[name] = dict(unit=name, path=path, dropins=dropins, exec_start=redact(" ".join(commands[0])))
            texts[name] = parts[0]
    holder = _procfs.unit_of(server_pid) if server_pid else None
    names = sorted(set(found) | set([holder] if holder else []))
    try:
        states = dict(zip(names, _systemd.show_many(run, names, _PROPERTIES))) if names else {}
    except (RuntimeError, CommandError, OSError):
        states = {}
    out = []
    for name in names:
        st = states.get(name, {})
        main_pid = int(st.get("MainPID") or 0)
        if name not in found:  # the server's own unit: counted when the server is its main process
            if st.get("LoadState") != "loaded" or main_pid != server_pid:
                continue
            path = st.get("FragmentPath") or None
            found[name] = dict(unit=name, path=path, dropins=(st.get("DropInPaths") or "").split(), exec_start=None)
            texts[name] = read_text(path) if path else ""
        u = found[name]
        if st.get("FragmentPath"):  # systemd's own view, where it has one (a drop-in folder this file does not scan)
            u.update(path=st["FragmentPath"], dropins=(st.get("DropInPaths") or "").split())
        file_state, active = st.get("UnitFileState") or None, st.get("ActiveState") or None
        u.update(files=[f for f in [u["path"]] + u["dropins"] if f], unit_file_state=file_state, active_state=active, main_pid=main_pid,
                 holds_port=bool(holder) and holder == name, managed=name == managed,
                 fights=file_state in ENABLED or active in RUNNING)
        u["ours"] = u["managed"] and MANAGED_MARK in texts[name]
        u["summary"] = "%s (%s, %s, %s%s)" % (name, u["path"], file_state or "state unknown", active or "?",
                                              ", pid %d" % main_pid if main_pid else "")
        out.append(u)
    return out


def decide(units, mode):
    """Each unit with what the takeover does to it (action, does): the managed name's file written by hand is
    rewritten (backed up first); another unit that would fight for the port (enabled or running) is replaced
    (backed up, disabled, stopped: by the switch when it holds the port) or, with mode refuse, refused; any other is
    left as it is. The managed unit itself is not listed."""
    out = []
    for u in units:
        if u["ours"]:
            continue
        u = dict(u)
        if u["managed"]:
            u.update(action="rewrite", does="backed up, then rewritten as the managed unit")
        elif not u["fights"]:
            u.update(action="leave", does="left as it is (neither enabled nor running)")
        elif mode == "refuse":
            u.update(action="refuse", does="refused (existing units: refuse)")
        else:
            what = ["backed up"]
            if u["unit_file_state"] in ENABLED:
                what.append("disabled")
            if u["holds_port"]:
                what.append("stopped by the switch")
            elif u["active_state"] in RUNNING:
                what.append("stopped")
            u.update(action="replace", does=", ".join(what))
        u["plan"] = "%s: %s: %s" % (u["summary"], u["action"], u["does"])
        out.append(u)
    return out


def refusal(port, summaries):
    """Why units that would fight for the port stop a takeover of it (existing_units refuse)."""
    one = len(summaries) == 1
    return ("existing_units is refuse, and %s that could serve port %d would fight for it: %s. Stop and disable %s, "
            "or let the cutover replace %s (existing_units replace)" % (
                "a unit" if one else "units", port, "; ".join(summaries), "it" if one else "them",
                "it" if one else "them"))


def take_over(units, state_dir, run, installed_at=None, now=None):
    """The takeover of decide()'s units (rewrite, replace): each one's files backed up into the state folder (once:
    a unit already recorded keeps its first copy and its state as it was), recorded in units.json (0600), each
    replaced unit disabled, and stopped when it runs and does not hold the port (the switch stops that one).
    installed_at: where the managed unit is written (a rewritten unit's file may be elsewhere). Returns what was
    done: [{unit, action, files, backups, before, serves, changed: [...]}]; raises RuntimeError (what failed and
    what was done before)."""
    path = _state_dir.units(state_dir)
    kept = _files.read_json(path) or {"units": []}
    known = dict((e["unit"], e) for e in kept["units"])
    done, files = [], []
    for u in units:
        if u["action"] not in ("rewrite", "replace"):
            continue
        entry = known.get(u["unit"])
        if entry is None:
            entry = dict(unit=u["unit"], action=u["action"], files=u["files"], modes={}, time=now or time.time(),
                         backups=[_state_dir.backup(state_dir, f) for f in u["files"]], serves=u["holds_port"],
                         before=dict(UnitFileState=u["unit_file_state"], ActiveState=u["active_state"]),
                         installed_at=installed_at if u["action"] == "rewrite" else None)
            for f, b in zip(u["files"], entry["backups"]):
                entry["modes"][f] = stat.S_IMODE(os.stat(f).st_mode)
                files.append(_files.File(b, read_text(f), 0o600, 0, 0, dir_mode=0o700))
            kept["units"].append(entry)
        done.append(dict(entry, now=dict(UnitFileState=u["unit_file_state"], ActiveState=u["active_state"])))
    if files:
        files.append(_files.File(path, json.dumps(kept, indent=2, sort_keys=True), 0o600, 0, 0, dir_mode=0o700))
        for f in files:
            try:
                f.write()
            except OSError as e:
                raise RuntimeError("could not back up the units that could serve the port: %s: %s" % (f.path, e))
    for u in units:
        if u["action"] != "replace":
            continue
        steps = []
        if u["unit_file_state"] in ENABLED:
            steps.append(_systemd.argv(_systemd.Verbs.DISABLE, u["unit"],
                                       runtime=u["unit_file_state"] == "enabled-runtime"))
        if u["active_state"] in RUNNING and not u["holds_port"]:
            steps.append(_systemd.argv(_systemd.Verbs.STOP, u["unit"]))
        for argv in steps:
            rc, out, err = _systemd.call(run, argv, 120)
            if rc != 0:
                raise RuntimeError("%s failed (rc %d): %s; the units' files were backed up into %s" % (
                    " ".join(argv), rc, (err or out).strip()[-500:], _state_dir.backups(state_dir)))
    return done


def restore(state_dir, run):
    """The undoing of a takeover (a rollback): each recorded unit's files written back as they were (a rewritten
    unit's managed file removed where it was written elsewhere), systemd reloaded, each unit that was enabled
    enabled again; units.json removed. Returns {restored: [names], serves: the unit that held the port, or None},
    or None when no takeover is recorded."""
    path = _state_dir.units(state_dir)
    kept = _files.read_json(path)
    if not kept or not kept.get("units"):
        return None
    reload_needed = False
    for entry in kept["units"]:
        for f, b in zip(entry["files"], entry["backups"]):
            if not os.path.isfile(b):  # a copy removed since: the file stays as it is, never emptied
                continue
            want = _files.File(f, read_text(b), entry["modes"].get(f, 0o644), 0, 0)
            if want.differs:
                want.write()
                reload_needed = True
        other = entry.get("installed_at")
        if other and os.path.normpath(other) not in [os.path.normpath(f) for f in entry["files"]] \
                and os.path.lexists(other):
            os.unlink(other)
            reload_needed = True
    steps = [_systemd.argv(_systemd.Verbs.DAEMON_RELOAD)] if reload_needed else []
    steps += [_systemd.argv(_systemd.Verbs.ENABLE, e["unit"], runtime=e["before"]["UnitFileState"] == "enabled-runtime")
              for e in kept["units"] if e["before"]["UnitFileState"] in ENABLED]
    for argv in steps:
        rc, out, err = _systemd.call(run, argv, 120)
        if rc != 0:
            raise RuntimeError("%s failed (rc %d): %s" % (" ".join(argv), rc, (err or out).strip()[-500:]))
    os.unlink(path)
    serving = [e["unit"] for e in kept["units"] if e.get("serves")]
    return dict(restored=[e["unit"] for e in kept["units"]], serves=serving[0] if serving else None)


def changes(before, after, redact=None):
    """What differs between two units' texts, setting by setting ("Section.Key" named by its key where it is
    unique): ["Restart: always -> on-failure", "ExecStartPost: added (...)", "RestartSec: removed (2)"]."""
    redact = redact or (lambda text: text)

    def settings(text):
        out = {}
        for section, key, value in parse(text):
            out.setdefault((section, key), []).append(value)
        return dict((k, " ".join(v)) for k, v in out.items())

    old, new = settings(before), settings(after)
    keys = sorted(set(old) | set(new), key=lambda k: (str(k[0]), k[1]))
    counts = {}
    for k in keys:
        counts[k[1]] = counts.get(k[1], 0) + 1
    lines = []
    for k in keys:
        label = k[1] if counts[k[1]] == 1 else "%s.%s" % k
        if k not in new:
            lines.append("%s: removed (%s)" % (label, redact(old[k])))
        elif k not in old:
            lines.append("%s: added (%s)" % (label, redact(new[k])))
        elif old[k] != new[k]:
            lines.append("%s: %s -> %s" % (label, redact(old[k]), redact(new[k])))
    return lines
