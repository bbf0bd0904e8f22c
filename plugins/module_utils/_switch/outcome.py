# -*- coding: utf-8 -*-
# Copyright: inferops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The switch's files in the port's state folder (their paths: _state_dir.py): its plan (switch-plan-ID.json,
written when the switch is claimed, removed once the record is kept from it, or when its worker ends if no record is
asked), the copy of the module's payload its worker runs from (switch-runtime-ID.zip, removed when the worker ends)
and its outcome (switch.json, written by the worker step by step); what the outcome says (whether a switch goes on,
which one a run reports), and the wait on it.

Each file is replaced whole (write_json), so either can be read without the lock.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import re
import time

from ansible_collections.inferops.sglang.plugins.module_utils import _state_dir
from ansible_collections.inferops.sglang.plugins.module_utils._host import procfs as _procfs
from ansible_collections.inferops.sglang.plugins.module_utils._switch.states import DONE, OutcomeStates
# write_json: how each of the switch's files is written (the worker and the lock take it from here)
from ansible_collections.inferops.sglang.plugins.module_utils._host.files import (  # noqa: F401  pylint: disable=unused-import
    read_json, write_json)

# how long a claim may stand without the process started for it (launch.launch: the payload's copy and systemd-run,
# which may take 30 s); once that process is known, its life decides
LAUNCH_WAIT = 60.0


class NeverReported(TimeoutError):
    """The claimed switch's process ended without writing an outcome, or none was started for it within
    LAUNCH_WAIT: the claim is to be given up (lock.unclaim), so that a process started for it after all switches
    nothing."""


def remove(*paths):
    for path in paths:
        try:
            os.unlink(path)
        except OSError:
            pass


def state(outcome):
    """The state of a switch's outcome (states.OutcomeStates), as its fields tell it; None without one."""
    if not outcome:
        return None
    if outcome.get("error"):
        return OutcomeStates.FAILED
    if outcome.get("finished"):
        return OutcomeStates.FINISHED
    return OutcomeStates.RUNNING if outcome.get("pid") else OutcomeStates.CLAIMED


def worker(outcome):
    """The (pid, starttime) of the process started for a claimed switch ((None, None) once it ended before it was
    seen), or None while the run that claimed it has not said (lock.worker_started)."""
    proc = outcome.get("worker")
    return None if proc is None else (proc.get("pid"), proc.get("starttime"))


def pending(outcome):
    """Whether the switch of this outcome file goes on: its process alive, or claimed and its process alive, or
    claimed and not started yet (for LAUNCH_WAIT at most)."""
    now = state(outcome)
    if now == OutcomeStates.RUNNING:
        return _procfs.is_alive((outcome["pid"], outcome.get("starttime")))
    if now != OutcomeStates.CLAIMED:
        return False
    proc = worker(outcome)
    if proc is None:
        return time.time() - outcome.get("claimed", 0) < LAUNCH_WAIT
    return proc[0] is not None and _procfs.is_alive(proc)


def current(state_dir, since=None):
    """The id of the switch of this port that a run begun at `since` (time.time()) must report rather than start
    its own: one in progress, or one that finished after `since`. None when there is none."""
    out = read_json(_state_dir.outcome(state_dir))
    if out and (pending(out) or since is not None and state(out) in DONE and out.get("began", 0) >= since):
        return out["id"]
    return None


def summary(outcome):
    """What a run's result says of the switch it reports."""
    return dict(run_id=outcome.get("id"), steps=outcome.get("steps", []), downtime=outcome.get("downtime"),
                started_at=outcome.get("started_at"), pid_started=outcome.get("pid_started"),
                previous_unit=outcome.get("previous_unit", False))


# What SGLang's log says once the model is loaded and the HTTP server warms up, and once it is ready.
_WARMUP = re.compile(r"warm.?up|Uvicorn running|Application startup complete", re.I)
_READY = re.compile(r"fired up and ready", re.I)


def progress_line(outcome, elapsed, log_line="", redact=None):
    """Where a switch is while it runs, in one line: the phase (stopping: the worker's steps before the unit's start,
    with the last one done; loading, warm-up: the unit's log; verifying: the log says ready), the seconds since its
    call began, and, once the unit started, the unit's last log line through redact (a _host.redact.Redactor: masked
    before it is cut to 200 characters, so that no part of a secret is left)."""
    outcome = outcome or {}
    steps = [s.get("step") for s in outcome.get("steps") or []]
    line = ((log_line or "").strip().splitlines()[-1:] or [""])[0]
    line = redact(line) if redact else line
    if not outcome.get("started_at"):
        phase = "stopping" + (" (%s done)" % steps[-1] if steps else "")
    elif _READY.search(line):
        phase = "verifying"
    elif _WARMUP.search(line):
        phase = "warm-up"
    else:
        phase = "loading"
    return "%s, %d s%s" % (phase, int(elapsed), (": " + line[:200]) if line and outcome.get("started_at") else "")


def wait(state_dir, run_id, timeout, poll=0.1, tick=None):
    """The outcome of switch run_id once finished (None: whichever switch runs now). TimeoutError otherwise.
    tick(outcome), when given, is called at each look with the outcome as it stands (None before the first)."""
    where = _state_dir.outcome(state_dir)
    deadline = time.monotonic() + timeout
    seen_at = time.monotonic()
    while True:
        out = read_json(where)
        mine = out is not None and (run_id is None or out.get("id") == run_id)
        if tick is not None:
            tick(out if mine else None)
        if mine and state(out) in DONE:
            return out
        if mine and state(out) == OutcomeStates.RUNNING:
            seen_at = time.monotonic()
            if not _procfs.is_alive((out["pid"], out["starttime"])):
                again = read_json(where)  # read again: it may have written its last word and ended since
                if again and again.get("id") == out["id"] and state(again) in DONE:
                    return again
                out["error"] = out.get("error") or "the switch process %d ended without finishing" % out["pid"]
                return out
        elif mine and state(out) == OutcomeStates.CLAIMED and worker(out) is not None:
            seen_at = time.monotonic()  # its process is known: it may take as long as it needs to begin
            if not pending(out) and state(read_json(where)) == OutcomeStates.CLAIMED:  # read again: it may have just begun
                pid = worker(out)[0]
                raise NeverReported("the switch process%s ended without reporting (see %s)" % (
                    " %d" % pid if pid else "", where))
        elif time.monotonic() - seen_at > LAUNCH_WAIT:
            raise NeverReported("the switch process never reported (see %s)" % where)
        if time.monotonic() >= deadline:
            raise TimeoutError("the switch did not finish within %.0f s; it goes on on the host (%s)" % (timeout, where))
        time.sleep(poll)
