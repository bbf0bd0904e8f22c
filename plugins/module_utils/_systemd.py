# -*- coding: utf-8 -*-
# Copyright: inferops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""systemctl and journalctl, always with a timeout."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.inferops.sglang.plugins.module_utils._command import CommandError, timed

TIMEOUT = 15
UNIT_PROPERTIES = ("ActiveState", "SubState", "NRestarts", "Result", "MainPID", "ExecMainStatus", "ExecMainCode",
                   "LoadState")


def show(run, unit, properties=UNIT_PROPERTIES):
    """{property: value} of a unit, from `systemctl show`."""
    return show_many(run, [unit], properties)[0]


def show_many(run, units, properties=UNIT_PROPERTIES):
    """[{property: value}] of each unit, in order, from one `systemctl show` (a block per unit)."""
    rc, out, err = timed(run, ["systemctl", "show", "--property=" + ",".join(properties)] + list(units), TIMEOUT)
    if rc != 0:
        raise RuntimeError("systemctl show %s failed (rc %d): %s" % (" ".join(units), rc, err.strip()))
    blocks = [dict(line.split("=", 1) for line in block.splitlines() if "=" in line)
              for block in out.strip("\n").split("\n\n")]
    if len(blocks) != len(units):
        raise RuntimeError("systemctl show answered %d blocks for %d units" % (len(blocks), len(units)))
    return blocks


def journal(run, unit, lines=20):
    """The unit's last journal lines (empty list when journalctl is missing or fails)."""
    try:
        rc, out, dummy = timed(run, ["journalctl", "-u", unit, "-n", str(lines), "--no-pager", "-o", "cat"], TIMEOUT)
    except (OSError, CommandError):
        return []
    return out.splitlines()[-lines:] if rc == 0 else []


def tail(path, lines=20):
    try:
        with open(path, "rb") as f:
            f.seek(0, 2)
            size = f.tell()
            f.seek(max(0, size - 65536))
            data = f.read().decode("utf-8", "replace")
    except OSError:
        return []
    return data.splitlines()[-lines:]


def log_lines(run, redact, unit=None, log_file=None, lines=20):
    """The end of the unit's journal, else of the log file, each line through redact ([] with neither)."""
    if unit:
        found = journal(run, unit, lines)
    elif log_file:
        found = tail(log_file, lines)
    else:
        found = []
    return [redact(line) for line in found]


class UnitWatch:
    """Tells when a unit can no longer come up: failed, stopped after it started, or restarted."""

    def __init__(self, run, unit):
        self.run = run
        self.unit = unit
        first = show(run, unit)
        if first.get("LoadState") == "not-found":
            raise RuntimeError("unit %s does not exist" % unit)
        self.restarts = int(first.get("NRestarts") or 0)
        self.seen_running = first.get("ActiveState") in ("active", "activating", "reloading")
        self.last = first

    def active(self):
        """None once the unit is active (its readiness gate passed), else what it is (a wait's gate)."""
        state = show(self.run, self.unit, ("ActiveState", "SubState"))
        if state.get("ActiveState") == "active":
            return None
        return "unit %s is %s (%s), not yet active" % (self.unit, state.get("ActiveState"), state.get("SubState"))

    def problem(self):
        """None while the unit may still come up; else why not."""
        p = show(self.run, self.unit)
        self.last = p
        state, sub = p.get("ActiveState"), p.get("SubState")
        if int(p.get("NRestarts") or 0) > self.restarts:
            return "unit %s restarted (NRestarts %s -> %s)" % (self.unit, self.restarts, p.get("NRestarts"))
        if sub == "auto-restart":
            return "unit %s is in activating (auto-restart): its process exited (%s)" % (self.unit, p.get("Result"))
        if sub == "start-post" and p.get("MainPID") == "0" and p.get("ExecMainCode") not in (None, "", "0"):
            return "unit %s: its main process exited (status %s) while ExecStartPost ran" % (
                self.unit, p.get("ExecMainStatus"))
        if state == "failed":
            return "unit %s failed (result %s, status %s)" % (self.unit, p.get("Result"), p.get("ExecMainStatus"))
        if state in ("active", "activating", "reloading"):
            self.seen_running = True
        elif state in ("inactive", "deactivating") and self.seen_running:
            return "unit %s stopped (%s/%s): its process exited with status %s (result %s)" % (
                self.unit, state, sub, p.get("ExecMainStatus"), p.get("Result"))
        return None
