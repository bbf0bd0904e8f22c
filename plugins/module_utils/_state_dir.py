# -*- coding: utf-8 -*-
# Copyright: inferops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Every path under a port's state folder, <state_dir>/<port>/ (mode 0700, root's), named once; what writes each:

  capture.json             what ran before the cutover (0600): the switch or the adoption, once its preflight passed
                           (_server/capture.py); a rollback starts it again (_switch/relaunch.py)
  switch.lock              one switch of the port at a time, an flock (_switch/lock.py)
  switch.json              the switch's outcome, written by its worker step by step (_switch/outcome.py)
  switch-plan-ID.json      the plan of a claimed switch, until its record is kept (_switch/lock.py)
  switch-runtime-ID.zip    the copy of the module's payload the switch's worker runs from, until it ends
                           (_switch/launch.py)
  units.json, units/PATH   the units that could serve the port, as they were before a takeover, and their files'
                           backups (_server/port_units.py)
  last.json, last.md       the record of the last cutover, rollback or adoption (_switch/record.py)
  history/YYYYmmddTHHMMSSZ-KIND.json
                           each record as it was written, the last ones kept (_switch/record.py)

The cutover role keeps the boot launchers' backups beside them, in boot-launchers/.

Standard library only, and nothing of module_utils: every layer may name these paths."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os

CAPTURE = "capture.json"
LOCK = "switch.lock"
OUTCOME = "switch.json"
UNITS = "units.json"
PREVIOUS = "previous-unit.json"  # the unit's files as they served before a restart that changed them
BACKUPS = "units"
HISTORY = "history"
_PLAN = ("switch-plan-", ".json")
_RUNTIME = ("switch-runtime-", ".zip")
RUNTIME_TEMP = (".switch-runtime-", ".tmp")  # the payload's copy while it is written (tempfile's prefix and suffix)


def folder(state_dir, port):
    """The state folder of the server on port, under state_dir."""
    return os.path.join(state_dir, str(port))


def capture(port_dir):
    return os.path.join(port_dir, CAPTURE)


def lock(port_dir):
    return os.path.join(port_dir, LOCK)


def outcome(port_dir):
    return os.path.join(port_dir, OUTCOME)


def plan(port_dir, run_id):
    return os.path.join(port_dir, "%s%s%s" % (_PLAN[0], run_id, _PLAN[1]))


def runtime(port_dir, run_id):
    """The copy of the module's payload that switch run_id's worker runs from."""
    return os.path.join(port_dir, "%s%s%s" % (_RUNTIME[0], run_id, _RUNTIME[1]))


def leftovers(port_dir):
    """Plans and payload copies of earlier switches (a new claim finds them: none of their runs needs them)."""
    try:
        names = os.listdir(port_dir)
    except OSError:
        return []
    return sorted(os.path.join(port_dir, n) for n in names
                  if n.startswith((_PLAN[0], _RUNTIME[0])) and n.endswith((_PLAN[1], _RUNTIME[1])))


def units(port_dir):
    """The units a takeover changed, as they were."""
    return os.path.join(port_dir, UNITS)


def previous(port_dir):
    """The unit's files as they were before the restart that changed them (a rollback of it puts them back)."""
    return os.path.join(port_dir, PREVIOUS)


def backups(port_dir):
    """Where the files of the units a takeover changed are backed up, each under its own path."""
    return os.path.join(port_dir, BACKUPS)


def backup(port_dir, path):
    """Where the file at path (a unit's, or a drop-in's) is kept: its whole path under units/."""
    return backups(port_dir) + os.path.normpath(path)


def records(record_dir, kind, stamp):
    """The record's files: last.json, history/STAMP-KIND.json (the run's own) and last.md."""
    return [last(record_dir), os.path.join(history(record_dir), "%s-%s.json" % (stamp, kind)),
            os.path.join(record_dir, "last.md")]


def last(record_dir):
    """The last record, as data (last.json)."""
    return os.path.join(record_dir, "last.json")


def history(record_dir):
    """The folder of the records as each was written."""
    return os.path.join(record_dir, HISTORY)
