# -*- coding: utf-8 -*-
# Copyright: inferops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""sglang_unit: the unit, its environment file and its readiness gate, in one call."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import re

from ansible_collections.inferops.sglang.plugins.module_utils import _files, _systemd, _unit
from ansible_collections.inferops.sglang.plugins.module_utils._base import UNIT_NAME, Base
from ansible_collections.inferops.sglang.plugins.module_utils._command import CommandError, timed


class SglangUnit(Base):
    """The unit, its environment file and its readiness gate: verified, written when they differ, enabled,
    started or restarted when asked, in one call."""

    def run(self):
        p = self.params
        name = p["name"]
        if not re.match(UNIT_NAME, name) or name.endswith(".service"):
            self.fail("name %r: give the service's name without .service, of letters, digits and _ . : -" % name)
        for key in ("environment_path", "gate_path"):
            if p[key] and not os.path.isabs(p[key]):
                self.fail("%s must be an absolute path, not %r" % (key, p[key]))
        service = name + ".service"
        run = self.module.run_command
        try:
            states = _systemd.show_many(run, [service] + p["wants"], ("LoadState", "ActiveState", "UnitFileState"))
        except (RuntimeError, CommandError) as e:
            self.fail(str(e))
        present = [u for u, s in zip(p["wants"], states[1:]) if s.get("LoadState") == "loaded"]
        unit = _files.File(os.path.join(p["unit_dir"], service), _unit.with_wants(p["unit"], present), 0o644, 0, 0)
        files = [unit]
        env = None
        if p["environment_path"]:
            env = _files.File(p["environment_path"], p["environment"], 0o600, 0, 0, dir_mode=0o700)
            files.append(env)
        if p["gate_path"]:
            files.append(_files.File(p["gate_path"], p["gate"], 0o644, 0, 0))
        if unit.content_differs:  # in check mode too; a unit that does not change was verified before
            try:
                why = _unit.verify(run, unit.content, service)
            except CommandError as e:
                why = str(e)
            if why:
                self.fail("systemd-analyze verify rejected the unit %s, so it was not installed: %s" % (service, why))
        now = states[0]
        active = now.get("ActiveState") in ("active", "activating", "reloading")
        enabled = now.get("UnitFileState") == "enabled"
        served_changed = unit.content_differs or (env is not None and env.content_differs)
        result = dict(changed=False, unit=service, unit_path=unit.path, checksum=_files.sha1(unit.content),
                      environment_file=p["environment_path"], wants_present=present, active_state=now.get("ActiveState"),
                      changed_files=[f.path for f in files if f.differs], reloaded=False,
                      enabled_changed=False, restarted=False, started=False,
                      restart_needed=served_changed and active and not p["restart_on_change"])
        if self.module._diff:  # pylint: disable=protected-access
            result["diff"] = [f.diff(_masked if f is env else None) for f in files if f.content_differs]
        self.write_files(files, **result)
        steps = []
        if p["enabled"] != enabled:  # the daemon-reload below reads the new links too: no reload of its own
            steps.append(("enabled_changed", ["systemctl"] + (["--no-reload"] if unit.content_differs else [])
                          + ["enable" if p["enabled"] else "disable", service]))
        if unit.content_differs:
            steps.append(("reloaded", ["systemctl", "daemon-reload"]))
        if p["restart_on_change"] and active and served_changed:
            steps.append(("restarted", ["systemctl", "restart", service]))
        elif p["state"] == "started" and not active:
            steps.append(("started", ["systemctl", "start", service]))
        result["changed"] = bool(result["changed_files"] or steps)
        for key, argv in steps:
            result[key] = True
            if self.module.check_mode:
                continue
            # a start blocks until the readiness gate says ready: systemd bounds it with TimeoutStartSec
            rc, out, err = run(argv) if key in ("restarted", "started") else timed(run, argv, 120)
            if rc != 0:
                self.fail("%s failed (rc %d): %s" % (" ".join(argv), rc, (err or out).strip()[-2000:]), **result)
        if result["restart_needed"]:
            self.module.warn("%s changed while running; it was NOT restarted (restart_on_change is false). Restart it "
                             "when convenient, or let the cutover do it." % service)
        result["elapsed"] = self.elapsed()
        self.module.exit_json(**result)


def _masked(text):
    """An environment file's text with the values hidden (it holds secrets)."""
    return "".join(line.split("=", 1)[0] + "=********\n" if "=" in line and not line.startswith("#") else line + "\n"
                   for line in text.splitlines())
