# -*- coding: utf-8 -*-
# Copyright: inferops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The switch itself, as the detached worker runs it (main(), started by _switch_launch): under the lock, the
preflight looked at again, then each step timed and its outcome written: stop the wrapper loop and the server
(drained), verify that nothing of it is left, release its GPUs, start the unit; or, for a rollback, stop the unit
and start the captured command again."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import time

from ansible_collections.inferops.sglang.plugins.module_utils import (
    _discover, _nvidia, _procfs, _relaunch, _signals, _switch_lock, _switch_outcome)
from ansible_collections.inferops.sglang.plugins.module_utils._command import run_command, timed
from ansible_collections.inferops.sglang.plugins.module_utils._files import read_json
from ansible_collections.inferops.sglang.plugins.module_utils._preflight import inspect
from ansible_collections.inferops.sglang.plugins.module_utils._readiness import Server

KILL_WAIT = 10.0        # after SIGKILL, how long a process may take to be gone
PORT_WAIT = 5.0         # after the family is gone, how long the port may take to be free
MEMORY_WAIT = 30.0      # after a release, how long nvidia-smi may lag
STRAY_GRACE = 10.0      # a released stray gets SIGTERM, then SIGKILL after this
DRAIN_LOOK = 0.05       # while the old server drains: how often its connections are counted
DRAIN_QUIET = 3         # ... and how many looks in a row must find none


class Drained:
    """True once the server has taken the SIGTERM (its /health answers 503) and no client connection has
    been open on its port for DRAIN_QUIET looks in a row: nothing is in flight. SGLang itself looks only
    every 5 s, then ends its tree; the switch ends it as soon as that is true. A server that ignores the
    SIGTERM never answers 503 and gets the whole drain budget."""

    def __init__(self, port):
        self.port = port
        url = _discover.local_url(port)
        self.server = Server(url) if url else None
        self.taken = False
        self.quiet = 0
        self.next_look = 0.0

    def __call__(self):
        now = time.monotonic()
        if self.server is None or now < self.next_look:
            return False
        self.next_look = now + DRAIN_LOOK
        if not self.taken:
            # a /health that still generates (>= 1 s) has not taken the SIGTERM yet: do not wait for it
            self.taken = self.server.request("/health", timeout=DRAIN_LOOK * 5).status == 503
            return False
        self.quiet = 0 if _discover.connections(self.port) else self.quiet + 1
        return self.quiet >= DRAIN_QUIET


class Worker:
    """Runs the plan: each step timed, the outcome written after each."""

    def __init__(self, plan, run=run_command):
        self.plan = plan
        self.run = run
        self.path = _switch_outcome.outcome_path(plan["state_dir"])
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
        """Under the lock, the switch of this plan; nothing when the outcome file holds another's live claim."""
        fd = _switch_lock.take_lock(self.plan["state_dir"], wait=_switch_lock.LOCK_WAIT)
        if fd is None:
            self.outcome.update(finished=True, error="another switch of port %d holds the lock %s" % (
                self.plan["port"], _switch_lock.lock_path(self.plan["state_dir"])))
            return self.outcome
        try:
            claimed = read_json(self.path) or {}
            if claimed.get("id") != self.plan["id"] and _switch_outcome.pending(claimed):
                self.outcome.update(finished=True, error="the switch of port %d is claimed by %s, not %s" % (
                    self.plan["port"], claimed.get("id"), self.plan["id"]))
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
        now = inspect(plan["port"], plan["unit_name"], plan["devices"], procs, self.run)
        self.stop_began = None
        if plan.get("target") == "capture":
            return self.back(now, procs)
        if now["owner"] == "unit" and plan["action"] != "restart":
            self.outcome["note"] = "%s already serves port %d: nothing to switch" % (unit, plan["port"])
            return
        if now["owner"] == "adhoc":
            if now["problems"]:
                raise RuntimeError("nothing was stopped: " + "; ".join(now["problems"]))
            self.step("stop wrapper", lambda: _signals.stop_loop(now["wrapper"]))
            self.stop_began = time.monotonic()
            self.step("stop server", lambda: self.stop_family(now, procs))
        elif now["owner"] == "unit" and plan["action"] == "restart":
            self.stop_began = time.monotonic()
            self.step("stop server", lambda: self.stop_unit(unit))
        self.step("verify zero", lambda: self.verify_zero(now, procs))
        self.step("release GPUs", lambda: self.release(now))
        self.step("start unit", lambda: self.start(unit))
        if self.stop_began is not None:
            self.outcome["downtime"] = round(time.monotonic() - self.stop_began, 3)
        self.outcome["started_at"] = time.time()

    def back(self, now, procs):
        """From the unit back to the captured command (a rollback)."""
        plan = self.plan
        if now["owner"] == "adhoc":
            self.outcome["note"] = "a server outside %s already serves port %d: nothing to roll back" % (
                plan["unit"], plan["port"])
            return
        self.stop_began = time.monotonic()
        self.step("stop server", lambda: self.stop_unit(plan["unit"]))
        self.step("verify zero", lambda: self.verify_zero(now, procs))
        self.step("release GPUs", lambda: self.release(now))
        self.step("start captured command", self.relaunch)
        self.outcome["downtime"] = round(time.monotonic() - self.stop_began, 3)
        self.outcome["started_at"] = time.time()

    def relaunch(self):
        detail = _relaunch.relaunch(self.plan["state_dir"])
        self.outcome["pid_started"] = detail["pid"]
        return detail

    def stop_family(self, now, procs):
        targets = [procs[f["pid"]] for f in now["family"] if f["pid"] in procs]
        server = procs[now["server"]["pid"]]
        res = _signals.stop(targets, roots=[server], sig=15, escalate=9, grace=self.plan["drain"],
                            kill_wait=KILL_WAIT, mode="mixed", done=Drained(self.plan["port"]))
        detail = {"pids": [t.pid for t in targets], "escalated": res.escalated, "drained": res.done_early,
                  "ended_by": res.ended_by, "timings": res.timings}
        if res.remaining:
            raise RuntimeError("%d process(es) survived SIGKILL (stuck: %s): %s" % (
                len(res.remaining), res.stuck, res.remaining))
        return detail

    def stop_unit(self, unit):
        rc, out, err = timed(self.run, ["systemctl", "stop", unit], self.plan["drain"] + 60)
        if rc != 0:
            raise RuntimeError("systemctl stop %s failed (rc %d): %s" % (unit, rc, (err or out).strip()))
        return {"unit": unit}

    def verify_zero(self, before, procs_before):
        """No process of the old family left (orphans that appeared since are stopped too), the port free."""
        deadline = time.monotonic() + PORT_WAIT
        killed = []
        while True:
            procs = _procfs.snapshot()
            left = [f["pid"] for f in before["family"] if _procfs.is_alive((f["pid"], f["starttime"]))]
            if before["owner"] == "adhoc" and before["server"]["pid"] in procs_before:
                # kin that left the tree while it stopped (reparented to PID 1): the same rule as discovery
                old = procs_before[before["server"]["pid"]]
                others = [q.pid for q in procs.values() if _discover.is_sglang(q)]
                for pid in _discover.family(old, procs, others):
                    if pid in procs and pid != old.pid and _signals.send(procs[pid].identity, 9):
                        killed.append(pid)
            listening = _discover.listeners(self.plan["port"], procs)
            if not left and not listening:
                return {"left": 0, "orphans_killed": killed}
            if time.monotonic() >= deadline:
                raise RuntimeError("not zero: family pids %s alive, port %d held by %s" % (
                    left, self.plan["port"], listening))
            time.sleep(0.05)

    def release(self, before):
        """Stop what still holds the server's GPUs: the family's leftovers, and strays when allowed."""
        allowed = set((f["pid"], f["starttime"]) for f in before["family"])
        if self.plan["release_strays"]:
            allowed |= set((s["pid"], s["starttime"]) for s in before["strays"])
        procs = _procfs.snapshot()
        targets = [h.proc for h in _nvidia.holders(procs, self.plan["devices"])
                   if h.proc.identity in allowed and set(h.gpus) & set(before["gpus"]) and not h.proc.is_zombie]
        smi = _nvidia.Smi(self.run)
        held = smi.reading() if smi.available and before["gpus"] else None
        res = _signals.stop(targets, sig=15, escalate=9, grace=STRAY_GRACE, kill_wait=KILL_WAIT)
        if res.remaining:
            raise RuntimeError("GPU holders survived SIGKILL: %s" % res.remaining)
        detail = {"released": [t.pid for t in targets], "gpus": before["gpus"]}
        if held is not None:
            gone = set(t.pid for t in targets) | set(i[0] for i in allowed)
            back = _nvidia.memory_back(smi, held, gone, MEMORY_WAIT)
            detail.update(memory_back=back["complete"], memory_wait=back["waited"], memory_freed=back["gpus"])
            detail["memory_used_mib"] = dict((g["index"], g["memory_used_mib"]) for g in back["after"]["gpus"]
                                             if g["index"] in before["gpus"])
        return detail

    def start(self, unit):
        timed(self.run, ["systemctl", "reset-failed", unit], 15)
        rc, out, err = timed(self.run, ["systemctl", "start", "--no-block", unit], 30)
        if rc != 0:
            raise RuntimeError("systemctl start %s failed (rc %d): %s" % (unit, rc, (err or out).strip()))
        return {"unit": unit}


def main(path):
    """Entry point of the detached process."""
    with open(path) as f:
        plan = json.load(f)
    Worker(plan).go()
