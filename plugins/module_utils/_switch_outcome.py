# -*- coding: utf-8 -*-
# Copyright: inferops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The switch's files in the port's state folder: its plan (switch-plan-ID.json, written when the switch is
claimed) and its outcome (switch.json, written by the worker step by step); what the outcome says (whether a
switch goes on, which one a run reports), and the wait on it.

Each file is replaced whole (write_json), so either can be read without the lock.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import time

from ansible_collections.inferops.sglang.plugins.module_utils import _procfs
from ansible_collections.inferops.sglang.plugins.module_utils._files import read_json

OUTCOME = "switch.json"
REPORT_WAIT = 15.0      # how long a claimed switch's process may take to report


def outcome_path(state_dir):
    """The outcome file of the port whose state folder this is."""
    return os.path.join(state_dir, OUTCOME)


def plan_path(state_dir, run_id):
    return os.path.join(state_dir, "switch-plan-%s.json" % run_id)


def write_json(path, data):
    tmp = "%s.%d.tmp" % (path, os.getpid())
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(data, f, indent=2, sort_keys=True)
    os.replace(tmp, path)


def pending(outcome):
    """Whether the switch of this outcome file goes on: its process alive, or claimed and not started yet."""
    if not outcome or outcome.get("finished"):
        return False
    if outcome.get("pid"):
        return _procfs.is_alive((outcome["pid"], outcome.get("starttime")))
    return time.time() - outcome.get("claimed", 0) < REPORT_WAIT


def current(state_dir, since=None):
    """The id of the switch of this port that a run begun at `since` (time.time()) must report rather than start
    its own: one in progress, or one that finished after `since`. None when there is none."""
    out = read_json(outcome_path(state_dir))
    if out and (pending(out) or since is not None and out.get("finished") and out.get("began", 0) >= since):
        return out["id"]
    return None


def summary(outcome):
    """What a run's result says of the switch it reports."""
    return dict(run_id=outcome.get("id"), steps=outcome.get("steps", []), downtime=outcome.get("downtime"),
                started_at=outcome.get("started_at"), pid_started=outcome.get("pid_started"))


def wait(state_dir, run_id, timeout, poll=0.1):
    """The outcome of switch run_id once finished (None: whichever switch runs now). TimeoutError otherwise."""
    where = outcome_path(state_dir)
    deadline = time.monotonic() + timeout
    seen_at = time.monotonic()
    while True:
        out = read_json(where)
        mine = out is not None and (run_id is None or out.get("id") == run_id)
        if mine and out.get("finished"):
            return out
        if mine and out.get("pid"):
            seen_at = time.monotonic()
            if not _procfs.is_alive((out["pid"], out["starttime"])):
                out["error"] = out.get("error") or "the switch process %d ended without finishing" % out["pid"]
                return out
        elif time.monotonic() - seen_at > REPORT_WAIT:
            raise TimeoutError("the switch process never reported (see %s)" % where)
        if time.monotonic() >= deadline:
            raise TimeoutError("the switch did not finish within %.0f s; it goes on on the host (%s)" % (timeout, where))
        time.sleep(poll)
