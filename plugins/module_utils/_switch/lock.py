# -*- coding: utf-8 -*-
# Copyright: inferops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The lock: one switch per port at a time (switch.lock in the port's state folder, an flock).

A run claims the switch under it (claim: its plan written, the outcome file saying it is claimed), or finds the
switch another run claimed and reports that one; the worker runs the switch under it; one run keeps the record
under it (RecordClaim). The adoption's watcher takes it too, so that it does not start the service mid-switch.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import fcntl
import os
import time

from ansible_collections.inferops.sglang.plugins.module_utils import _state_dir
from ansible_collections.inferops.sglang.plugins.module_utils._host import procfs as _procfs
from ansible_collections.inferops.sglang.plugins.module_utils._host.files import read_json
from ansible_collections.inferops.sglang.plugins.module_utils._switch.outcome import current, remove, state, write_json
from ansible_collections.inferops.sglang.plugins.module_utils._switch.states import DONE, OutcomeStates

LOCK_WAIT = 30.0        # how long a claim or a record waits for the lock another run holds for as long


def take_lock(state_dir, wait=0.0):
    """An open, locked file descriptor, or None when another holder keeps the lock longer than `wait` seconds."""
    os.makedirs(state_dir, mode=0o700, exist_ok=True)
    fd = os.open(_state_dir.lock(state_dir), os.O_RDWR | os.O_CREAT, 0o600)
    deadline = time.monotonic() + wait
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return fd
        except OSError:
            if time.monotonic() >= deadline:
                os.close(fd)
                return None
        time.sleep(0.05)


def lock_unless(state_dir, answer):
    """(fd, None) once the lock is taken, or (None, what answer() says) as soon as it says something while another
    holds the lock, or (None, None) after LOCK_WAIT. answer() reads the outcome file, which is replaced whole:
    readable without the lock."""
    deadline = time.monotonic() + LOCK_WAIT
    while True:
        fd = take_lock(state_dir)
        if fd is not None:
            return fd, None
        said = answer()
        if said:
            return None, said
        if time.monotonic() >= deadline:
            return None, None
        time.sleep(0.05)


def claim(plan, since, prepare=None):
    """Under the lock: the id of the switch this run must report (its own plan, written as switch-plan-ID.json
    with an outcome file that says it is claimed, or the switch another run claimed), and whether it is its own.
    One switch per port: a claim is made only when no other is in progress nor finished since `since`. prepare()
    runs under the lock before its own claim is written, and returns the plan to write (what the run puts in place
    before the switch, so that nothing is when another run's switch is reported instead, or the lock stays held)."""
    state_dir = plan["state_dir"]
    fd, other = lock_unless(state_dir, lambda: current(state_dir, since))
    if other:
        return other, False
    if fd is None:
        raise RuntimeError("the lock %s stays held, with no switch in progress" % _state_dir.lock(state_dir))
    try:
        other = current(state_dir, since)
        if other:
            return other, False
        if prepare is not None:
            plan = prepare()
        remove(*_state_dir.leftovers(state_dir))  # no run can keep an earlier switch's record once this claim replaces its outcome
        write_json(_state_dir.plan(state_dir, plan["id"]), plan)
        write_json(_state_dir.outcome(state_dir), {"id": plan["id"], "action": plan["action"], "pid": None,
                                                   "claimed": time.time(), "began": time.time(), "steps": [],
                                                   "finished": False, "error": None})
        return plan["id"], True
    finally:
        os.close(fd)


def worker_started(state_dir, run_id, pid):
    """The process pid (0: one that already ended) was started for the claim of run_id: said in its outcome while it
    is still only claimed, so that its wait and other runs follow that process's life (outcome.pending). Nothing
    once the process wrote its own outcome, or when the lock stays held longer than LOCK_WAIT (the claim then
    stands for outcome.LAUNCH_WAIT)."""
    proc = {"pid": pid or None, "starttime": _procfs.starttime(pid) if pid else None}

    def begun():  # its process began (it holds the lock while it runs), or the claim was given up
        out = read_json(_state_dir.outcome(state_dir)) or {}
        return out.get("id") != run_id or state(out) != OutcomeStates.CLAIMED

    fd, dummy = lock_unless(state_dir, begun)
    if fd is None:
        return
    try:
        if not begun():
            out = read_json(_state_dir.outcome(state_dir))
            out["worker"] = proc
            write_json(_state_dir.outcome(state_dir), out)
    finally:
        os.close(fd)


def unclaim(state_dir, run_id, error):
    """The claim of run_id ends with error (its worker could not be started)."""
    fd = take_lock(state_dir, wait=LOCK_WAIT)
    try:
        out = read_json(_state_dir.outcome(state_dir)) or {}
        if out.get("id") == run_id and state(out) == OutcomeStates.CLAIMED:
            out.update(finished=True, error=error)
            write_json(_state_dir.outcome(state_dir), out)
    finally:
        if fd is not None:
            os.close(fd)


class RecordClaim:
    """`with claim as mine:` - mine is True for the one caller that keeps the record of switch run_id (finished,
    without a record yet); claim.done(paths) says it was kept. Held under the lock."""

    def __init__(self, state_dir, run_id):
        self.path = _state_dir.outcome(state_dir)
        self.state_dir, self.run_id, self.fd, self.out = state_dir, run_id, None, None

    def __enter__(self):
        self.fd = take_lock(self.state_dir, wait=LOCK_WAIT)
        out = read_json(self.path) or {}
        if self.fd is not None and out.get("id") == self.run_id and state(out) in DONE \
                and "recorded" not in out:
            self.out = out
        return self.out is not None

    def done(self, paths):
        """The record was kept: said in the outcome; the plan it was kept from removed."""
        self.out["recorded"] = {"time": time.time(), "pid": os.getpid(), "files": sorted(paths)}
        write_json(self.path, self.out)
        remove(_state_dir.plan(self.state_dir, self.run_id))

    def __exit__(self, *exc):
        if self.fd is not None:
            os.close(self.fd)
        return False
