# -*- coding: utf-8 -*-
# Copyright: inferops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The switch itself, as the detached worker runs it (main(), started by _switch_launch): under the lock, the
preflight looked at again, then each step timed and its outcome written: stop the wrapper loop and the server
(drained; a unit the switch took over that runs it, stopped), verify that nothing of it is left, release its GPUs,
start the unit (not for a stop alone: one rank of a multi-node server, whose ranks start together); or, for a
rollback, stop the unit, put back the units the switch took over, and start the captured command again (or the unit
that ran the server before)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import sys
import time

from ansible_collections.inferops.sglang.plugins.module_utils import _state_dir
from ansible_collections.inferops.sglang.plugins.module_utils._host import (
    nvidia as _nvidia, procfs as _procfs, shm as _shm, signals as _signals, systemd as _systemd)
from ansible_collections.inferops.sglang.plugins.module_utils._host.command import run_command
from ansible_collections.inferops.sglang.plugins.module_utils._host.files import File, read_json
from ansible_collections.inferops.sglang.plugins.module_utils._server import (
    family as _family, listeners as _listeners, port_units as _port_units)
from ansible_collections.inferops.sglang.plugins.module_utils._server.readiness import Server
from ansible_collections.inferops.sglang.plugins.module_utils._switch import (
    lock as _switch_lock, outcome as _switch_outcome, preflight as _preflight, relaunch as _relaunch)
from ansible_collections.inferops.sglang.plugins.module_utils._switch.states import DONE, Actions, Owners, Targets

KILL_WAIT = 10.0        # after SIGKILL, how long a process may take to be gone
PORT_WAIT = 5.0         # after the family is gone, how long the port may take to be free
MEMORY_WAIT = 30.0      # after a release, how long nvidia-smi may lag
STRAY_GRACE = 10.0      # a released stray gets SIGTERM, then SIGKILL after this
STOP_GRACE = 10.0       # a unit that never served gets SIGTERM, then SIGKILL of its cgroup after this
STOP_PROPERTIES = ("ActiveState", "SubState", "Job", "Result", "MainPID", "NRestarts", "ActiveEnterTimestampMonotonic",
                   "ActiveExitTimestampMonotonic", "InactiveExitTimestampMonotonic", "ExecMainStartTimestampMonotonic",
                   "ExecMainExitTimestampMonotonic")
DRAIN_LOOK = 0.05       # while the old server drains: how often its connections are counted
DRAIN_QUIET = 3         # ... and how many looks in a row must find none
PORT_CLOSED_GRACE = 1.0  # a port closed by the SIGTERM, no connection open: how long the server may end on its own
# A multi-node server's rank 0, drained: how long it may take to end on its own. SGLang's watchdog looks every 5 s,
# then sends its ShutdownReq to every rank, the other nodes' included, and gives its schedulers up to 15 s
# (0.5.15 managers/tokenizer_manager.py:2684-2689): a SIGKILL before that leaves the other nodes to find a lost peer.
SHUTDOWN_GRACE = 20.0


class Drained:
    """True once nothing is in flight: the server has taken the SIGTERM (its /health answers 503) and no client
    connection has been open on its port for DRAIN_QUIET looks in a row. SGLang itself looks only every 5 s, then
    ends its tree; the switch ends it as soon as that is true. A SIGTERM before the server's first generate request
    (its warm-up's) reaches uvicorn, not SGLang: the port closes at once, no 503 ever comes, and the process lives on
    until its warm-up gives up (about 120 s; seen on a real 0.5.15). So a port that refuses connections, none open,
    for PORT_CLOSED_GRACE counts as drained too. A server that ignores the SIGTERM answers neither way and gets the
    whole drain budget. then: seconds more, once drained, before it counts (the server ends on its own meanwhile)."""

    def __init__(self, port, then=0.0):
        self.port = port
        self.then = then
        self.since = None
        url = _listeners.local_url(port)
        self.server = Server(url) if url else None
        self.taken = False
        self.quiet = 0
        self.closed_since = None
        self.next_look = 0.0

    def __call__(self):
        if self.since is None and self.nothing_in_flight():
            self.since = time.monotonic()
        return self.since is not None and time.monotonic() - self.since >= self.then

    def nothing_in_flight(self):
        now = time.monotonic()
        if now < self.next_look:
            return False
        self.next_look = now + DRAIN_LOOK
        if not self.taken:
            # a /health that still generates (>= 1 s) has not taken the SIGTERM yet: do not wait for it. Nothing
            # listened to begin with: a closed port
            status = self.server.request("/health", timeout=DRAIN_LOOK * 5).status if self.server else 0
            self.taken = status == 503
            if status == 0 and not _listeners.connections(self.port):
                self.closed_since = self.closed_since or now
                return now - self.closed_since >= PORT_CLOSED_GRACE
            self.closed_since = None
            return False
        self.quiet = 0 if _listeners.connections(self.port) else self.quiet + 1
        return self.quiet >= DRAIN_QUIET


class Worker:
    """Runs the plan: each step timed, the outcome written after each."""

    def __init__(self, plan, run=run_command):
        self.plan = plan
        self.run = run
        self.path = _state_dir.outcome(plan["state_dir"])
        self.t0 = time.monotonic()
        self.outcome = {"id": plan["id"], "action": plan["action"], "pid": os.getpid(),
                        "starttime": _procfs.starttime(os.getpid()), "began": time.time(), "steps": [],
                        "finished": False, "error": None}

    def step(self, name, fn):
        t = time.monotonic()
        detail = fn() or {}
        self.outcome["steps"].append(dict(detail, step=name, seconds=round(time.monotonic() - t, 3)))
        _switch_outcome.write_json(self.path, self.outcome)

    def go(self):
        """Under the lock, the switch of this plan; nothing when the outcome file holds another's live claim, or this
        plan's claim given up (its run found no process reporting for it, and failed)."""
        fd = _switch_lock.take_lock(self.plan["state_dir"], wait=_switch_lock.LOCK_WAIT)
        if fd is None:  # the outcome file is written only under the lock: said in this process's journal instead
            self.outcome.update(finished=True, error="another switch of port %d holds the lock %s" % (
                self.plan["port"], _state_dir.lock(self.plan["state_dir"])))
            sys.stderr.write("%s\n" % self.outcome["error"])
            return self.outcome
        try:
            claimed = read_json(self.path) or {}
            if claimed.get("id") != self.plan["id"] and _switch_outcome.pending(claimed):
                self.outcome.update(finished=True, error="the switch of port %d is claimed by %s, not %s" % (
                    self.plan["port"], claimed.get("id"), self.plan["id"]))
                return self.outcome
            if claimed.get("id") == self.plan["id"] and _switch_outcome.state(claimed) in DONE:
                self.outcome = claimed  # its run gave it up before this process started: left as that run said
                return self.outcome
            _switch_outcome.write_json(self.path, self.outcome)
            self.switch()
        except Exception as e:  # pylint: disable=broad-except
            self.outcome["error"] = "%s: %s" % (type(e).__name__, e)
        finally:
            if not self.outcome["finished"]:
                self.outcome["finished"] = True
                self.outcome["seconds"] = round(time.monotonic() - self.t0, 3)
                _switch_outcome.write_json(self.path, self.outcome)
            os.close(fd)
        return self.outcome

    def switch(self):
        plan = self.plan
        unit = plan["unit"]
        procs = _procfs.snapshot()
        taken = plan.get("units") or []  # the units that could serve the port, disabled by the run that claimed it
        now = _preflight.inspect(plan["port"], plan["unit_name"], plan["devices"], procs, self.run, taken=taken,
                                 rank=plan.get("rank"), gpus=plan.get("given_gpus"),
                                 release_users=plan.get("release_users") or (),
                                 weights=(plan.get("weights") or {}).get("name"))
        self.stop_began = None
        if plan.get("target") == Targets.CAPTURE:
            return self.back(now, procs)
        stopping_unit = plan["action"] in (Actions.RESTART, Actions.STOP)
        if now["owner"] == Owners.UNIT and not stopping_unit:
            self.outcome["note"] = "%s already serves port %d: nothing to switch" % (unit, plan["port"])
            return
        if now["owner"] == Owners.ADHOC:
            if now["problems"]:
                raise RuntimeError("nothing was stopped: " + "; ".join(now["problems"]))
            self.step("stop wrapper", lambda: _signals.stop_loop(now["wrapper"]))
            self.stopping()
            holder = now["server"]["unit"]
            if holder in taken:  # the operator's unit runs the server: systemd stops it (else it starts it again)
                self.step("stop server", lambda: self.stop_unit(holder))
            else:
                self.step("stop server", lambda: self.stop_family(now, procs))
        elif now["owner"] == Owners.UNIT or plan["action"] == Actions.STOP:  # the unit, serving (stop: or starting)
            self.stopping()
            self.step("stop server", lambda: self.stop_unit(unit))
        self.step("verify zero", lambda: self.verify_zero(now, procs))
        if (plan.get("weights") or {}).get("restart"):  # what the daemon holds changes: it starts again with the unit
            self.step("stop weight cache", self.stop_weights)
        self.step("release GPUs", lambda: self.release(now))
        if plan["action"] == Actions.STOP:  # the unit starts in a switch of its own (every rank of a group together)
            return
        self.step("start unit", lambda: self.start(unit))
        if self.stop_began is not None:
            self.outcome["downtime"] = round(time.monotonic() - self.stop_began, 3)
        self.outcome["started_at"] = time.time()

    def stopping(self):
        """The server's stop begins: the downtime counts from here (stop_began_at, wall clock, for a group's ranks)."""
        self.stop_began = time.monotonic()
        self.outcome["stop_began_at"] = time.time()

    def back(self, now, procs):
        """From the unit back to the captured command (a rollback)."""
        plan = self.plan
        now = _preflight.vacant(now, procs)
        if now["owner"] == Owners.ADHOC:
            self.outcome["note"] = "a server outside %s already serves port %d: nothing to roll back" % (
                plan["unit"], plan["port"])
            return
        self.stopping()
        self.step("stop server", lambda: self.stop_unit(plan["unit"], plan.get("unit_served")))
        self.step("verify zero", lambda: self.verify_zero(now, procs))
        if plan.get("weights") and not plan.get("previous"):
            # the captured command reads its weights itself: the daemon's GPU memory freed
            self.step("stop weight cache", self.stop_weights)
        self.step("release GPUs", lambda: self.release(now))
        self.restored = {}
        if plan.get("previous"):  # a failed restart that changed the unit: the unit as it served before it
            self.step("restore previous unit", self.restore_previous)
            if self.restored.get("weights"):  # the daemon's unit as it was: it starts again with the unit
                self.step("stop weight cache", self.stop_weights)
            self.outcome.update(unit_started=plan["unit"], previous_unit=True)
            self.step("start unit", lambda: self.start(plan["unit"]))
            self.outcome["downtime"] = round(time.monotonic() - self.stop_began, 3)
            self.outcome["started_at"] = time.time()
            return
        if os.path.exists(_state_dir.units(plan["state_dir"])):
            self.step("restore units", self.restore_units)
        serves = self.restored.get("serves")
        if serves:  # the server ran under one of them: that unit starts again, as it ran
            self.outcome["unit_started"] = serves
            self.step("start unit", lambda: self.start(serves))
        else:
            self.step("start captured command", self.relaunch)
        self.outcome["downtime"] = round(time.monotonic() - self.stop_began, 3)
        self.outcome["started_at"] = time.time()

    def restore_previous(self):
        """The unit's files written back as they served before the failed restart (one it added removed), systemd
        reloaded, the unit enabled; the kept copy removed."""
        path = self.plan["previous"]
        kept = read_json(path) or {}
        for f in kept.get("files") or []:
            if f["text"] is None:
                if os.path.lexists(f["path"]):
                    os.unlink(f["path"])
            else:
                File(f["path"], f["text"], f["mode"] if f["mode"] is not None else 0o644, 0, 0).write()
        for argv in (_systemd.argv(_systemd.Verbs.DAEMON_RELOAD),
                     _systemd.argv(_systemd.Verbs.ENABLE, self.plan["unit"])):
            rc, out, err = _systemd.call(self.run, argv, 120)
            if rc != 0:
                raise RuntimeError("%s failed (rc %d): %s" % (" ".join(argv), rc, (err or out).strip()[-500:]))
        os.unlink(path)
        weights = (self.plan.get("weights") or {}).get("unit")
        self.restored["weights"] = bool(weights) and any(
            os.path.basename(f["path"]) == weights for f in kept.get("files") or [])
        return {"files": [f["path"] for f in kept.get("files") or []]}

    def restore_units(self):
        """The units the switch took over, as they were (files, enabled), systemd reloaded."""
        self.restored = _port_units.restore(self.plan["state_dir"], self.run) or {}
        self.outcome["units_restored"] = self.restored.get("restored")
        return dict(self.restored)

    def relaunch(self):
        detail = _relaunch.relaunch(self.plan["state_dir"])
        self.outcome["pid_started"] = detail["pid"]
        return detail

    def stop_family(self, now, procs):
        targets = [procs[f["pid"]] for f in now["family"] if f["pid"] in procs]
        server = procs[now["server"]["pid"]]
        res = _signals.stop(targets, roots=[server], sig=15, escalate=9, grace=self.plan["drain"],
                            kill_wait=KILL_WAIT, mode="mixed", done=self.drained())
        detail = {"pids": [t.pid for t in targets], "escalated": res.escalated, "drained": res.done_early,
                  "ended_by": res.ended_by, "timings": res.timings}
        if res.remaining:
            raise RuntimeError("%d process(es) survived SIGKILL (stuck: %s): %s" % (
                len(res.remaining), res.stuck, res.remaining))
        return detail

    def drained(self):
        """When the server's drain is over (Drained). A multi-node server's rank 0 is then given SHUTDOWN_GRACE to end
        on its own: its end sends the shutdown to the other ranks, which otherwise wait for a peer that is gone."""
        return Drained(self.plan["port"], then=SHUTDOWN_GRACE if self.plan.get("rank") == 0 else 0.0)

    def stop_unit(self, unit, served=None):
        """Stop the unit, as the family of a hand-launched server is stopped: SIGTERM (systemd's stop, queued so that
        the SIGKILL that may follow counts as the end of the stop, not a crash to restart: RestartForceExitStatus),
        then SIGKILL to every process of its cgroup once the drain is over, not after TimeoutStopSec. One that served
        drains until nothing is in flight (Drained: its port closed or quiet after the 503s), for the drain budget at
        most. One that never served (still starting, or stopping after a start that failed) has nothing to drain and
        may ignore SIGTERM for minutes (a real SGLang server whose port was taken does, keeping its GPU memory; one
        that became active moments ago has not warmed up yet, and lives on for its warm-up's 120 s): STOP_GRACE.
        served=False (the rollback of a run that failed: the unit's start is what failed, and no client was sent to
        it) stops it as one that never served, whatever systemd says: active moments before the rollback, after its
        gate passed late, it would otherwise get the whole drain budget when its server ignores SIGTERM.
        The step says which (`served`), the state it found (`unit_state`), and why a SIGKILL (`escalation`)."""
        state = _systemd.show(self.run, unit, STOP_PROPERTIES)
        was = "%s/%s" % (state.get("ActiveState"), state.get("SubState"))
        if state.get("ActiveState") not in ("active", "reloading", "activating", "deactivating"):
            # nothing runs (inactive, failed): the stop only cancels a restart that may be due
            rc, out, err = _systemd.systemctl(self.run, _systemd.Verbs.STOP, unit, 60)
            if rc != 0:
                raise RuntimeError("systemctl stop %s failed (rc %d): %s" % (unit, rc, (err or out).strip()))
            return {"unit": unit, "unit_state": was, "unit_read": state}
        served = _systemd.served(state) and served is not False
        t0 = time.monotonic()
        rc, out, err = _systemd.systemctl(self.run, _systemd.Verbs.STOP, unit, 30, no_block=True)
        if rc != 0:
            raise RuntimeError("systemctl stop %s failed (rc %d): %s" % (unit, rc, (err or out).strip()))
        detail = {"unit": unit, "unit_state": was, "served": served, "unit_read": state}
        if served:
            drained = self.drained()
            budget = self.plan["drain"]
            while not self.stopped(unit, 0):
                if drained():
                    detail["drained"] = True
                    break
                if time.monotonic() - t0 >= budget:
                    detail["drained"] = False
                    break
                time.sleep(DRAIN_LOOK)
            else:
                return detail
            why = "served, and nothing was in flight" if detail["drained"] else (
                "served, and was still stopping when the drain budget (%g s) ran out" % budget)
        elif self.stopped(unit, STOP_GRACE):
            return detail
        else:
            why = "%s and was still %s %.0f s after SIGTERM" % (
                "never served" if not _systemd.served(state) else "served no client (its run failed)",
                state.get("ActiveState"), time.monotonic() - t0)
        rc, out, err = _systemd.systemctl(self.run, _systemd.Verbs.KILL, unit, 30, signal="SIGKILL")
        if not self.stopped(unit, KILL_WAIT):
            raise RuntimeError("%s %s, and did not stop after SIGKILL of its cgroup either (rc %d): %s"
                               % (unit, why, rc, (err or out).strip()))
        if rc != 0:  # it ended on its own as the SIGKILL went out: systemd may have unloaded it ("not loaded")
            return detail
        detail.update(escalated=True, escalation="%s %s: SIGKILL to its cgroup (systemctl kill --signal=SIGKILL)" % (
            unit, why))
        return detail

    def stop_weights(self):
        """The weight cache daemon's unit stopped (nothing to drain: no client is left), so that its GPU memory is
        free and the unit's start starts it again, as its unit now says."""
        unit = self.plan["weights"]["unit"]
        state = _systemd.show(self.run, unit, ("LoadState", "ActiveState", "MainPID"))
        if state.get("ActiveState") in (None, "inactive", "failed") and state.get("LoadState") != "loaded":
            return {"unit": unit, "unit_state": state.get("LoadState")}  # not there: nothing runs
        rc, out, err = _systemd.systemctl(self.run, _systemd.Verbs.STOP, unit, 120)
        if rc != 0 or not self.stopped(unit, KILL_WAIT):
            raise RuntimeError("systemctl stop %s failed (rc %d): %s" % (unit, rc, (err or out).strip()))
        return {"unit": unit, "unit_state": state.get("ActiveState"), "main_pid": state.get("MainPID")}

    def stopped(self, unit, wait):
        """Whether the unit is inactive or failed within wait seconds."""
        deadline = time.monotonic() + wait
        while True:
            if _systemd.show(self.run, unit, ("ActiveState",)).get("ActiveState") in ("inactive", "failed"):
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.1)

    def verify_zero(self, before, procs_before):
        """No process of the old family left (orphans that appeared since are stopped too), the port free."""
        deadline = time.monotonic() + PORT_WAIT
        killed = []
        while True:
            procs = _procfs.snapshot()
            left = [f["pid"] for f in before["family"] if _procfs.is_alive((f["pid"], f["starttime"]))]
            if before["owner"] == Owners.ADHOC and before["server"]["pid"] in procs_before:
                # kin that left the tree while it stopped (reparented to PID 1): the same rule as discovery
                old = procs_before[before["server"]["pid"]]
                now = procs.get(old.pid)
                view = procs
                if now is not None and now.starttime != old.starttime:
                    # the pid was reused: the new process and its tree are someone else's, never the old server's kin
                    theirs = set([old.pid]) | set(_procfs.descendants(procs, [old.pid]))
                    view = dict((pid, q) for pid, q in procs.items() if pid not in theirs)
                others = [q.pid for q in view.values() if _family.is_sglang(q)]
                for pid in _family.family(old, view, others):
                    if pid in procs and pid != old.pid and _signals.send(procs[pid].identity, 9):
                        killed.append(pid)
            listening = _listeners.listeners(self.plan["port"], procs)
            if not left and not listening:
                return {"left": 0, "orphans_killed": killed}
            if time.monotonic() >= deadline:
                raise RuntimeError("not zero: family pids %s alive, port %d held by %s" % (left, self.plan["port"], [
                    "%d (%s)" % (pid, procs[pid].cmdline[:120]) if pid in procs else pid for pid in listening]))
            time.sleep(0.05)

    def release(self, before):
        """Stop what still holds the server's GPUs: the family's leftovers, and strays when allowed - only on the GPUs
        the module's preflight attributed to the server before anything ran (the plan's): what the worker finds now
        never widens them. A stray is released only when the preflight found it releasable (the server's user's, or
        of a user the operator listed, serving nothing): never another server's process, nor another user's job."""
        allowed = set((f["pid"], f["starttime"]) for f in before["family"])
        strays = set((s["pid"], s["starttime"]) for s in before["strays"] if s.get("releasable")) \
            if self.plan["release_strays"] else set()
        theirs = set(before["gpus"]) & set(self.plan.get("gpus", []))
        procs = _procfs.snapshot()
        targets = [h.proc for h in _nvidia.holders(procs, self.plan["devices"]) if not h.proc.is_zombie and (
            h.proc.identity in allowed and set(h.gpus) & set(before["gpus"])
            or h.proc.identity in strays and set(h.gpus) & theirs)]
        allowed |= strays
        smi = _nvidia.Smi(self.run)
        held = smi.reading() if smi.available and before["gpus"] else None
        res = _signals.stop(targets, sig=15, escalate=9, grace=STRAY_GRACE, kill_wait=KILL_WAIT)
        if res.remaining:
            raise RuntimeError("GPU holders survived SIGKILL: %s" % res.remaining)
        detail = {"released": [t.pid for t in targets], "gpus": before["gpus"]}
        detail["shm"] = _shm.after_stop(before["family"])  # the family gone: the shared memory it left behind
        if held is not None:
            gone = set(t.pid for t in targets) | set(i[0] for i in allowed)
            back = _nvidia.memory_back(smi, held, gone, MEMORY_WAIT)
            detail.update(memory_back=back["complete"], memory_wait=back["waited"], memory_freed=back["gpus"])
            detail["memory_used_mib"] = dict((g["index"], g["memory_used_mib"]) for g in back["after"]["gpus"]
                                             if g["index"] in before["gpus"])
        return detail

    def start(self, unit):
        _systemd.systemctl(self.run, _systemd.Verbs.RESET_FAILED, unit, 15)
        rc, out, err = _systemd.systemctl(self.run, _systemd.Verbs.START, unit, 30, no_block=True)
        if rc != 0:
            raise RuntimeError("systemctl start %s failed (rc %d): %s" % (unit, rc, (err or out).strip()))
        return {"unit": unit}


def main(path):
    """Entry point of the detached process. Once it ends, the payload's copy it ran from is removed, and its plan
    when no record is to be kept from it."""
    with open(path) as f:
        plan = json.load(f)
    try:
        Worker(plan).go()
    finally:
        _switch_outcome.remove(_state_dir.runtime(plan["state_dir"], plan["id"]),
                               *([] if plan.get("record") else [path]))
