# -*- coding: utf-8 -*-
# Copyright: inferops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""sglang_unit: the unit, its environment file and its readiness gate, in one call."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import re
import time

from ansible_collections.inferops.sglang.plugins.module_utils import _files, _systemd, _unit
from ansible_collections.inferops.sglang.plugins.module_utils._base import UNIT_NAME, Base
from ansible_collections.inferops.sglang.plugins.module_utils._command import CommandError, timed


class SglangUnit(Base):
    """The unit, its environment file and its readiness gate: verified, written when they differ, enabled,
    started or restarted when asked, in one call."""

    def run(self):
        p = self.params
        result = install(self, p, enabled=p["enabled"], state=p["state"], restart_on_change=p["restart_on_change"])
        if result["restart_needed"]:
            self.module.warn("%s changed while running; it was NOT restarted (restart_on_change is false). Restart it "
                             "when convenient, or let the cutover do it." % result["unit"])
        del result["seconds"]
        result["elapsed"] = self.elapsed()
        self.module.exit_json(**result)


def install(mgr, spec, enabled=True, state="present", restart_on_change=False):
    """Verify (when it changed), write what differs, enable, reload, start or restart: spec has name, unit, environment,
    environment_path, gate, gate_path, wants and unit_dir. Returns the result (with a diff in diff mode); a rejected
    unit, a bad path or a failed systemctl fails mgr's module. Nothing is written or run in check mode."""
    name = spec["name"]
    if not re.match(UNIT_NAME, name) or name.endswith(".service"):
        mgr.fail("name %r: give the service's name without .service, of letters, digits and _ . : -" % name)
    for key in ("environment_path", "gate_path"):
        if spec[key] and not os.path.isabs(spec[key]):
            mgr.fail("%s must be an absolute path, not %r" % (key, spec[key]))
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
        version = _unit.systemd_version(run)
    except CommandError as e:
        mgr.fail(str(e))
    text, omitted = _unit.for_systemd(_unit.with_wants(spec["unit"], present), version)
    unit = _files.File(os.path.join(spec["unit_dir"], service), text, 0o644, 0, 0)
    files = [unit]
    env = None
    if spec["environment_path"]:
        env = _files.File(spec["environment_path"], spec["environment"], 0o600, 0, 0, dir_mode=0o700)
        files.append(env)
    if spec["gate_path"]:
        files.append(_files.File(spec["gate_path"], spec["gate"], 0o644, 0, 0))
    if unit.content_differs:  # in check mode too; a unit that does not change was verified before
        try:
            why = _unit.verify(run, unit.content, service)
        except CommandError as e:
            why = str(e)
        if why:
            mgr.fail("systemd-analyze verify rejected the unit %s, so it was not installed: %s" % (service, why))
    now = states[0]
    active = now.get("ActiveState") in ("active", "activating", "reloading")
    served_changed = unit.content_differs or (env is not None and env.content_differs)
    result = dict(changed=False, unit=service, unit_path=unit.path, checksum=_files.sha1(unit.content),
                  environment_file=spec["environment_path"], environment_names=_unit.names(spec["environment"]),
                  wants_present=present, systemd_version=version, omitted=omitted, active_state=now.get("ActiveState"),
                  changed_files=[f.path for f in files if f.differs], reloaded=False,
                  enabled_changed=False, restarted=False, started=False,
                  restart_needed=served_changed and active and not restart_on_change)
    if module._diff:  # pylint: disable=protected-access
        result["diff"] = [f.diff(_masked if f is env else None) for f in files if f.content_differs]
    mgr.write_files(files, **result)
    steps = []
    if enabled != (now.get("UnitFileState") == "enabled"):  # the daemon-reload below reads the new links too
        steps.append(("enabled_changed", ["systemctl"] + (["--no-reload"] if unit.content_differs else [])
                      + ["enable" if enabled else "disable", service]))
    if unit.content_differs:
        steps.append(("reloaded", ["systemctl", "daemon-reload"]))
    if restart_on_change and active and served_changed:
        steps.append(("restarted", ["systemctl", "restart", service]))
    elif state == "started" and not active:
        steps.append(("started", ["systemctl", "start", service]))
    result["changed"] = bool(result["changed_files"] or steps)
    for key, argv in steps:
        result[key] = True
        if module.check_mode:
            continue
        # a start blocks until the readiness gate says ready: systemd bounds it with TimeoutStartSec
        rc, out, err = run(argv) if key in ("restarted", "started") else timed(run, argv, 120)
        if rc != 0:
            mgr.fail("%s failed (rc %d): %s" % (" ".join(argv), rc, (err or out).strip()[-2000:]), **result)
    result["seconds"] = round(time.monotonic() - t, 3)
    return result


def _masked(text):
    """An environment file's text with the values hidden (it holds secrets)."""
    return "".join(line.split("=", 1)[0] + "=********\n" if "=" in line and not line.startswith("#") else line + "\n"
                   for line in text.splitlines())
