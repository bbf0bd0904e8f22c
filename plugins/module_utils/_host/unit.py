# -*- coding: utf-8 -*-
# Copyright: inferops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""A service's name, and a systemd unit's text before it is installed: optional dependencies, the settings the host's
systemd knows, and systemd-analyze's verdict."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import re
import shutil
import tempfile
import time

from ansible_collections.inferops.sglang.plugins.module_utils._host import files as _files, systemd as _systemd
from ansible_collections.inferops.sglang.plugins.module_utils._host.command import CommandError, timed

TIMEOUT = 60

# A service's name without .service (an optional @instance), as sglang_switch, sglang_adopt and sglang_unit take it.
UNIT_NAME = r"^[A-Za-z0-9][A-Za-z0-9_.:-]*(@[A-Za-z0-9_.:-]+)?\Z"

# Each setting the unit templates (roles/systemd_unit/templates/*.service.j2) write, and the first systemd that
# knows it (systemd's NEWS); 0: in every systemd a supported distribution ships (219 and older). A `Key=value` entry
# is a value newer than its key. The one table: a unit test checks that it covers every line of the template.
SINCE = {
    "Description": 0, "Wants": 0, "After": 0, "RequiresMountsFor": 0, "ExecStart": 0, "ExecStartPre": 0, "ExecStartPost": 0,
    "WorkingDirectory": 0, "User": 0, "Group": 0, "EnvironmentFile": 0, "KillMode": 0, "TimeoutStartSec": 0,
    "TimeoutStopSec": 0, "Restart": 0, "RestartSec": 0, "SuccessExitStatus": 0, "RestartForceExitStatus": 0,
    "LimitNOFILE": 0, "LimitMEMLOCK": 0, "LimitCORE": 0, "Type": 0, "Requires": 0, "PrivateTmp": 0,
    "JoinsNamespaceOf": 209,
    "NoNewPrivileges": 0, "ProtectSystem": 0, "WantedBy": 0, "WatchdogSec": 0, "NotifyAccess": 0,
    "KillMode=mixed": 209,
    "StartLimitIntervalSec": 230,  # [Unit]; before 230 StartLimitInterval= of [Service]
    "StartLimitBurst": 230,  # [Unit] from 230
    "ProtectKernelModules": 232,
    "ProtectControlGroups": 232,
    "LockPersonality": 235,
    "Type=exec": 240,
    "RestrictSUIDSGID": 242,
}
# What an older systemd gets instead of a value it does not know (a setting without one is left out).
INSTEAD = {"Type=exec": "Type=simple", "KillMode=mixed": "KillMode=control-group"}


def is_unit_name(name):
    """Whether name is a service's name as the modules and the roles take it: no .service, an optional @instance."""
    return bool(re.match(UNIT_NAME, name)) and not name.endswith(".service")


def check_unit_name(name, option, fail):
    """name (given as option), or fail(message) when it is not a service's name without .service."""
    if not is_unit_name(name):
        fail("%s %r: give the service's name without .service, of letters, digits and _ . : -" % (option, name))
    return name


def with_wants(text, units):
    """The unit's text with `units` added to the first Wants= and After= of its [Unit] section (lines made when
    there is none): a unit that exists on this host only is pulled in and ordered before the service."""
    if not units:
        return text
    lines = text.split("\n")
    section, seen, header = None, set(), None
    for i, line in enumerate(lines):
        s = line.strip()
        if s.startswith("[") and s.endswith("]"):
            section = s
            if s == "[Unit]":
                header = i
            continue
        key = s.split("=", 1)[0] if "=" in s else None
        if section == "[Unit]" and key in ("Wants", "After") and key not in seen:
            seen.add(key)
            lines[i] = line.rstrip() + " " + " ".join(units)
    if header is None:
        lines = ["[Unit]"] + lines
        header = 0
    for key in ("After", "Wants"):
        if key not in seen:
            lines.insert(header + 1, "%s=%s" % (key, " ".join(units)))
    return "\n".join(lines)


def root_lines(text):
    """The lines of a unit's [Service] that would run something as root although the unit runs as a user (a User= of
    its own): an Exec*= command with the + or ! prefix (full privileges), PermissionsStartOnly=, a second User= or
    Group= (the last one wins). The unit template writes none of them, so a value written into it added them."""
    section, users, found, lines = None, [], [], text.split("\n")
    for line in lines:
        s = line.strip()
        if s.startswith("[") and s.endswith("]"):
            section = s
        elif section == "[Service]" and s.startswith("User="):
            users.append(s[len("User="):].strip())
    if not [u for u in users if u not in ("", "root", "0")]:
        return []  # a root unit runs everything as root anyway
    section, seen = None, set()
    for n, line in enumerate(lines, 1):
        s = line.strip()
        if s.startswith("[") and s.endswith("]"):
            section = s
            continue
        key, eq, value = s.partition("=")
        if section != "[Service]" or not eq or s.startswith(("#", ";")):
            continue
        value = value.lstrip()
        prefix = value[:len(value) - len(value.lstrip("-@:+!"))]
        if key.startswith("Exec") and ("+" in prefix or "!" in prefix) or key == "PermissionsStartOnly" \
                or key in ("User", "Group") and key in seen:
            found.append("line %d: %s" % (n, s))
        seen.add(key)
    return found


def systemd_version(run):
    """The host's systemd version (`systemctl --version`: "systemd 247 (247.3-7)"), None when it cannot say."""
    rc, out, dummy = _systemd.systemctl(run, _systemd.Verbs.VERSION, timeout=TIMEOUT)
    words = out.split() if rc == 0 else []
    if len(words) > 1 and words[0] == "systemd":
        digits = words[1].split(".")[0].split("~")[0]
        if digits.isdigit():
            return int(digits)
    return None


def for_systemd(text, version):
    """(text, omitted): the unit's text for systemd `version` - each setting newer than it (SINCE) replaced by what
    that systemd knows (INSTEAD) or left out - and the "Key=value (needs N)" lines changed. None: as it is."""
    if version is None:
        return text, []
    lines, omitted = [], []
    for line in text.split("\n"):
        s = line.strip()
        key = s.split("=", 1)[0] if "=" in s and not s.startswith("#") else None
        need = max(SINCE.get(key, 0), SINCE.get(s, 0)) if key else 0
        if need > version:
            omitted.append("%s (needs %d)" % (s, need))
            for whole in (s, key):
                if whole in INSTEAD:
                    lines.append(INSTEAD[whole])
                    break
            continue
        lines.append(line)
    return "\n".join(lines), omitted


def names(environment):
    """The variable names an environment file's text sets, sorted."""
    return sorted(set(line.split("=", 1)[0].strip() for line in environment.splitlines()
                      if "=" in line and not line.lstrip().startswith("#")))


def verify(run, text, service, beside=None):
    """None when systemd-analyze accepts the unit's text as `service`, else what it said. beside: {service: text} of
    the units it depends on that are not installed yet (written next to it, where systemd-analyze looks for them)."""
    folder = tempfile.mkdtemp(prefix="inferops-unit-")
    try:
        for name, content in sorted((beside or {}).items()):
            with open(os.path.join(folder, name), "w") as f:
                f.write(content)
        path = os.path.join(folder, service)
        with open(path, "w") as f:
            f.write(text)
        # the plain path: the file is named after the service (PATH:NAME needs systemd 250)
        rc, out, err = timed(run, ["systemd-analyze", "verify", path], TIMEOUT)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    if rc == 0:
        return None
    return (err.strip() or out.strip() or "rc %d" % rc).replace(path, service)


def install(mgr, spec, enabled=True, state="present", restart_on_change=False):
    """Verify (when it changed), write what differs, enable, reload, start or restart: spec has name and the options of
    _specs.UNIT_FILES_SPEC (unit, unit_dir, environment, environment_path, gate, gate_path, wants). Returns the result (with a diff in diff mode); a rejected
    unit, a bad path or a failed systemctl fails mgr's module. Nothing is written or run in check mode."""
    return put(mgr, prepare(mgr, spec, enabled, state, restart_on_change))


def prepare(mgr, spec, enabled=True, state="present", restart_on_change=False):
    """What install() would do, looked at and verified, nothing written or run: (result, files, steps) for put(); a
    rejected unit or a bad path fails mgr's module."""
    name = check_unit_name(spec["name"], "name", mgr.fail)
    for key in ("environment_path", "gate_path", "sweep_path"):
        if spec.get(key) and not os.path.isabs(spec[key]):
            mgr.fail("%s must be an absolute path, not %r" % (key, spec[key]))
    escalating = root_lines(spec["unit"])
    if escalating:
        mgr.fail("the unit %s.service runs as a user, yet would run this as root: %s. Refused, nothing was written "
                 "(the unit's template writes no such line: a value written into it added it)"
                 % (name, "; ".join(escalating)))
    t = time.monotonic()
    service = name + ".service"
    module = mgr.module
    run = module.run_command
    try:
        states = _systemd.show_many(run, [service] + spec["wants"], ("LoadState", "ActiveState", "UnitFileState"))
    except (RuntimeError, CommandError) as e:
        mgr.fail(str(e))
    present = [u for u, s in zip(spec["wants"], states[1:]) if s.get("LoadState") == "loaded"]
    try:
        version = systemd_version(run)
    except CommandError as e:
        mgr.fail(str(e))
    text, omitted = for_systemd(with_wants(spec["unit"], present), version)
    unit = _files.File(os.path.join(spec["unit_dir"], service), text, 0o644, 0, 0)
    files = [unit]
    env = None
    if spec["environment_path"]:
        env = _files.File(spec["environment_path"], spec["environment"], 0o600, 0, 0, dir_mode=0o700)
        files.append(env)
    if spec["gate_path"]:
        files.append(_files.File(spec["gate_path"], spec["gate"], 0o644, 0, 0))
    if spec.get("sweep_path"):
        files.append(_files.File(spec["sweep_path"], spec["sweep"], 0o644, 0, 0))
    if unit.content_differs:  # in check mode too; a unit that does not change was verified before
        try:
            why = verify(run, unit.content, service, spec.get("beside"))
        except CommandError as e:
            why = str(e)
        if why:
            mgr.fail("systemd-analyze verify rejected the unit %s, so it was not installed: %s" % (service, why))
    now = states[0]
    active = now.get("ActiveState") in ("active", "activating", "reloading")
    served_changed = unit.content_differs or (env is not None and env.content_differs)
    result = dict(changed=False, unit=service, unit_path=unit.path, checksum=_files.sha1(unit.content),
                  environment_file=spec["environment_path"], environment_names=names(spec["environment"]),
                  wants_present=present, systemd_version=version, omitted=omitted, active_state=now.get("ActiveState"),
                  changed_files=[f.path for f in files if f.differs], reloaded=False,
                  enabled_changed=False, restarted=False, started=False,
                  restart_needed=served_changed and active and not restart_on_change)
    if module._diff:  # pylint: disable=protected-access
        result["diff"] = [f.diff(_masked if f is env else None) for f in files if f.content_differs]
    steps = []
    if enabled != (now.get("UnitFileState") == "enabled"):  # the daemon-reload below reads the new links too
        steps.append(("enabled_changed", _systemd.argv(_systemd.Verbs.ENABLE if enabled else _systemd.Verbs.DISABLE,
                                                       service, no_reload=unit.content_differs)))
    if unit.content_differs:
        steps.append(("reloaded", _systemd.argv(_systemd.Verbs.DAEMON_RELOAD)))
    if restart_on_change and active and served_changed:
        steps.append(("restarted", _systemd.argv(_systemd.Verbs.RESTART, service)))
    elif state == "started" and not active:
        steps.append(("started", _systemd.argv(_systemd.Verbs.START, service)))
    result["changed"] = bool(result["changed_files"] or steps)
    for key, argv in steps:
        result[key] = True
    result["seconds"] = round(time.monotonic() - t, 3)
    return result, files, steps


def put(mgr, prepared):
    """prepare()'s files written where they differ and its systemctl calls run (nothing in check mode); returns its
    result, timed. A failed write or systemctl fails mgr's module."""
    result, files, steps = prepared
    t = time.monotonic()
    module = mgr.module
    mgr.write_files(files, **result)
    for key, argv in steps:
        if module.check_mode:
            continue
        # a start blocks until the readiness gate says ready: systemd bounds it with TimeoutStartSec
        rc, out, err = _systemd.call(module.run_command, argv, None if key in ("restarted", "started") else 120)
        if rc != 0:
            mgr.fail("%s failed (rc %d): %s" % (" ".join(argv), rc, (err or out).strip()[-2000:]), **result)
    result["seconds"] = round(result["seconds"] + time.monotonic() - t, 3)
    return result


def _masked(text):
    """An environment file's text with the values hidden (it holds secrets)."""
    return "".join(line.split("=", 1)[0] + "=********\n" if "=" in line and not line.startswith("#") else line + "\n"
                   for line in text.splitlines())
