# -*- coding: utf-8 -*-
# Copyright: inferops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The switch from the server on a port (ad hoc, or the service itself) to the service, as one host-side step.

inspect() reads what is on the port and what the switch would touch (the preflight). launch() runs run()
detached from the controller, in a transient systemd unit (a new session where systemd is not PID 1), so a
dropped connection cannot stop it half-way; a lock allows one switch per port at a time. run() writes its
outcome, step by step, to a file the module (or a rerun) waits on.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import fcntl
import json
import os
import shutil
import subprocess
import sys
import time
import zipfile

from ansible_collections.inferops.sglang.plugins.module_utils import _discover, _nvidia, _procfs, _signals
from ansible_collections.inferops.sglang.plugins.module_utils._command import CommandError, timed
from ansible_collections.inferops.sglang.plugins.module_utils._files import read_json
from ansible_collections.inferops.sglang.plugins.module_utils._readiness import Server
from ansible_collections.inferops.sglang.plugins.module_utils._redact import Redactor
from ansible_collections.inferops.sglang.plugins.module_utils._selection import Selector

KILL_WAIT = 10.0        # after SIGKILL, how long a process may take to be gone
PORT_WAIT = 5.0         # after the family is gone, how long the port may take to be free
MEMORY_WAIT = 30.0      # after a release, how long nvidia-smi may lag
STRAY_GRACE = 10.0      # a released stray gets SIGTERM, then SIGKILL after this
OUTCOME = "switch.json"
LOCK_WAIT = 30.0        # how long a claim or a record waits for the lock another run holds for as long
REPORT_WAIT = 15.0      # how long a claimed switch's process may take to report
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


def run_command(argv):
    """(rc, stdout, stderr) of argv: the worker's stand-in for AnsibleModule.run_command."""
    try:
        # the detached worker has no AnsibleModule, hence no run_command
        p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,  # pylint: disable=ansible-bad-function
                             universal_newlines=True)
    except OSError as e:
        return 127, "", str(e)
    out, err = p.communicate()
    return p.returncode, out, err


def redactor_for(proc, flags=()):
    """A Redactor that masks the secrets of this process's argv and environment."""
    base = Redactor(flags=flags)
    return Redactor(flags=flags, values=base.secrets_of(proc.argv, _procfs.environ(proc.pid)))


def _row(proc, redact, **extra):
    d = proc.as_dict(redact)
    d["starttime"] = proc.starttime
    d.update(extra)
    return d


def main_pid(run, unit):
    """The MainPID systemd gives for a unit (0 when none, or when systemctl cannot tell)."""
    try:
        rc, out, dummy = timed(run, ["systemctl", "show", unit, "--property=MainPID", "--value"], 15)
    except (OSError, CommandError):
        return 0
    try:
        return int(out.strip()) if rc == 0 else 0
    except ValueError:
        return 0


def inspect(port, unit, devices=_nvidia.DEFAULT_DEVICES, procs=None, run=run_command, flags=()):
    """What serves `port` and what a switch to `unit` (a name without .service) would touch.

    owner: None (nothing listens), "adhoc" (a server outside the unit) or "unit" (the unit's own).
    problems: reasons the switch must not begin (anything that listens but is not an SGLang server,
    another service whose main process is the server, listeners outside the family).
    strays: processes outside the family on the server's GPUs (not protected): the caller decides.
    """
    procs = _procfs.snapshot() if procs is None else procs
    service = unit + ".service"
    out = {"port": port, "unit": service, "owner": None, "server": None, "family": [], "wrapper": None,
           "gpus": [], "strays": [], "protected": [], "problems": []}
    pids = _discover.listeners(port, procs)
    if not pids:
        hidden = _discover.hidden_listeners(port, procs)
        if hidden:
            out["problems"].append(_discover.hidden_message(port, hidden))
        return out
    server = _discover.main_process(pids[0], procs)
    redact = redactor_for(server, flags)
    out["server"] = _row(server, redact, unit=_procfs.unit_of(server.pid))
    if out["server"]["unit"] == service:
        out["owner"] = "unit"
        members = sorted(p.pid for p in procs.values() if not p.is_zombie and _procfs.unit_of(p.pid) == service)
    else:
        out["owner"] = "adhoc"
        members = _discover.family_of(server, procs)
        out["wrapper"] = _discover.wrapper(server, procs)
        if out["wrapper"]:
            w = procs[out["wrapper"]["pid"]]
            out["wrapper"].update(starttime=w.starttime, cmdline=redact(w.cmdline))
        if not _discover.is_sglang(server):
            out["problems"].append("port %d is held by pid %d (%s), which is not an SGLang server" % (
                port, server.pid, redact(server.cmdline)[:200]))
        other = out["server"]["unit"]
        if other and main_pid(run, other) == server.pid:
            out["problems"].append(
                "the server on port %d is the main process of %s, which would start it again: stop and disable "
                "that unit first, or manage it under its own name" % (port, other))
    out["family"] = [_row(procs[pid], redact) for pid in members if pid in procs]
    for pid in pids:
        if pid not in members:
            out["problems"].append("pid %d (%s) listens on port %d and is not of the server's family" % (
                pid, redact(procs[pid].cmdline)[:200], port))
    fam = set(members)
    holders = _nvidia.holders(procs, devices)
    gpus = sorted(set(g for h in holders if h.proc.pid in fam for g in h.gpus))
    out["gpus"] = gpus
    selector = Selector(required=False)
    ancestors = set(_procfs.ancestors(selector.me, procs))
    for h in holders:
        if h.proc.pid in fam or h.proc.is_zombie or not set(h.gpus) & set(gpus):
            continue
        why = selector.refusal(h.proc, ancestors)
        row = _row(h.proc, redact, devices=h.files, gpus=h.gpus)
        if why:
            out["protected"].append(dict(row, reason=why))
        else:
            out["strays"].append(row)
    return out


# --- the lock ---------------------------------------------------------------------------------------------

def lock_path(state_dir):
    return os.path.join(state_dir, "switch.lock")


def take_lock(state_dir, wait=0.0):
    """An open, locked file descriptor, or None when another holder keeps the lock longer than `wait` seconds."""
    os.makedirs(state_dir, mode=0o700, exist_ok=True)
    fd = os.open(lock_path(state_dir), os.O_RDWR | os.O_CREAT, 0o600)
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


def plan_path(state_dir, run_id):
    return os.path.join(state_dir, "switch-plan-%s.json" % run_id)


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
    out = read_json(os.path.join(state_dir, OUTCOME))
    if out and (pending(out) or since is not None and out.get("finished") and out.get("began", 0) >= since):
        return out["id"]
    return None


def claim(plan, since):
    """Under the lock: the id of the switch this run must report (its own plan, written as switch-plan-ID.json
    with an outcome file that says it is claimed, or the switch another run claimed), and whether it is its own.
    One switch per port: a claim is made only when no other is in progress nor finished since `since`."""
    state_dir = plan["state_dir"]
    deadline = time.monotonic() + LOCK_WAIT
    while True:
        fd = take_lock(state_dir)
        if fd is not None:
            break
        other = current(state_dir, since)  # the outcome file is replaced whole: readable without the lock
        if other:
            return other, False
        if time.monotonic() >= deadline:
            raise RuntimeError("the lock %s stays held, with no switch in progress" % lock_path(state_dir))
        time.sleep(0.05)
    try:
        other = current(state_dir, since)
        if other:
            return other, False
        write_json(plan_path(state_dir, plan["id"]), plan)
        write_json(os.path.join(state_dir, OUTCOME), {"id": plan["id"], "action": plan["action"], "pid": None,
                                                      "claimed": time.time(), "began": time.time(), "steps": [],
                                                      "finished": False, "error": None})
        return plan["id"], True
    finally:
        os.close(fd)


def unclaim(state_dir, run_id, error):
    """The claim of run_id ends with error (its worker could not be started)."""
    fd = take_lock(state_dir, wait=LOCK_WAIT)
    try:
        out = read_json(os.path.join(state_dir, OUTCOME)) or {}
        if out.get("id") == run_id and not out.get("pid"):
            out.update(finished=True, error=error)
            write_json(os.path.join(state_dir, OUTCOME), out)
    finally:
        if fd is not None:
            os.close(fd)


class RecordClaim:
    """`with claim as mine:` - mine is True for the one caller that keeps the record of switch run_id (finished,
    without a record yet); claim.done(paths) says it was kept. Held under the lock."""

    def __init__(self, state_dir, run_id):
        self.path = os.path.join(state_dir, OUTCOME)
        self.state_dir, self.run_id, self.fd, self.out = state_dir, run_id, None, None

    def __enter__(self):
        self.fd = take_lock(self.state_dir, wait=LOCK_WAIT)
        out = read_json(self.path) or {}
        if self.fd is not None and out.get("id") == self.run_id and out.get("finished") and "recorded" not in out:
            self.out = out
        return self.out is not None

    def done(self, paths):
        self.out["recorded"] = {"time": time.time(), "pid": os.getpid(), "files": sorted(paths)}
        write_json(self.path, self.out)

    def __exit__(self, *exc):
        if self.fd is not None:
            os.close(self.fd)
        return False


# --- the outcome file -----------------------------------------------------------------------------------

def write_json(path, data):
    tmp = "%s.%d.tmp" % (path, os.getpid())
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(data, f, indent=2, sort_keys=True)
    os.replace(tmp, path)


# --- the detached step ----------------------------------------------------------------------------------

class Worker:
    """Runs the plan: each step timed, the outcome written after each."""

    def __init__(self, plan, run=run_command):
        self.plan = plan
        self.run = run
        self.path = os.path.join(plan["state_dir"], OUTCOME)
        self.t0 = time.monotonic()
        self.outcome = {"id": plan["id"], "action": plan["action"], "pid": os.getpid(),
                        "starttime": _procfs.starttime(os.getpid()), "began": time.time(), "steps": [],
                        "finished": False, "error": None}

    def step(self, name, fn):
        t = time.monotonic()
        detail = fn() or {}
        self.outcome["steps"].append(dict(detail, step=name, seconds=round(time.monotonic() - t, 3)))
        write_json(self.path, self.outcome)

    def go(self):
        """Under the lock, the switch of this plan; nothing when the outcome file holds another's live claim."""
        fd = take_lock(self.plan["state_dir"], wait=LOCK_WAIT)
        if fd is None:
            self.outcome.update(finished=True, error="another switch of port %d holds the lock %s" % (
                self.plan["port"], lock_path(self.plan["state_dir"])))
            return self.outcome
        try:
            claimed = read_json(self.path) or {}
            if claimed.get("id") != self.plan["id"] and pending(claimed):
                self.outcome.update(finished=True, error="the switch of port %d is claimed by %s, not %s" % (
                    self.plan["port"], claimed.get("id"), self.plan["id"]))
                return self.outcome
            write_json(self.path, self.outcome)
            self.switch()
        except Exception as e:  # pylint: disable=broad-except
            self.outcome["error"] = "%s: %s" % (type(e).__name__, e)
        finally:
            if not self.outcome["finished"]:
                self.outcome["finished"] = True
                self.outcome["seconds"] = round(time.monotonic() - self.t0, 3)
                write_json(self.path, self.outcome)
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
            self.step("stop wrapper", lambda: self.stop_wrapper(now))
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
        """The captured command (its wrapper loop, when it had one) exactly as it ran: argv, environment, cwd,
        user, log file; in a session of its own, as nohup left it."""
        cap = read_json(os.path.join(self.plan["state_dir"], "capture.json"))
        if not cap:
            raise RuntimeError("no capture in %s: nothing to start again" % self.plan["state_dir"])
        what = cap.get("wrapper") or cap
        pid = launch_detached(what, cap)
        self.outcome["pid_started"] = pid
        return {"pid": pid, "argv0": what["argv"][0], "wrapper": bool(cap.get("wrapper")), "log": what.get("stdout")}

    def stop_wrapper(self, now):
        w = now["wrapper"]
        if not w or w["kind"] != "shell loop":
            return {"note": "no wrapper loop" if not w else "%s left alone (it does not restart the server)" % w["kind"]}
        sent = _signals.send((w["pid"], w["starttime"]), 9)
        return {"pid": w["pid"], "signal": "KILL" if sent else "gone before"}

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


def launch_detached(what, cap):
    """Start what.argv with what's environment, cwd and log files as cap's user; returns its pid."""
    exe = what.get("argv0_resolved") or what.get("exe")
    uid, gid = cap.get("uid", 0), cap.get("gid", 0)

    def demote():
        if os.getuid() != uid:
            os.setgroups([])
            os.setgid(gid)
            os.setuid(uid)

    with open(os.devnull, "r+b") as null:
        out = open(what["stdout"], "ab") if what.get("stdout") else null
        err = out if what.get("stderr") == what.get("stdout") else (open(what["stderr"], "ab") if what.get("stderr") else null)
        try:
            p = subprocess.Popen(what["argv"], executable=exe, env=what["environment"], cwd=what["cwd"],  # pylint: disable=ansible-bad-function
                                 stdin=null, stdout=out, stderr=err, close_fds=True, start_new_session=True,
                                 preexec_fn=demote)
        finally:
            for f in set([out, err]) - set([null]):
                f.close()
    return p.pid


def main(path):
    """Entry point of the detached process."""
    with open(path) as f:
        plan = json.load(f)
    Worker(plan).go()


def _runtime():
    """Where this code lives: (path, is_zip). Under Ansible it is the module's payload zip, removed when the
    module ends, so launch() keeps a copy."""
    here = os.path.abspath(__file__)
    path = here
    while path != os.path.dirname(path):
        if os.path.isfile(path) and zipfile.is_zipfile(path):
            return path, True
        path = os.path.dirname(path)
    marker = os.sep + "ansible_collections" + os.sep
    return here[:here.rfind(marker)], False


def launch(plan, since, run=run_command):
    """Claim the switch of the port and start the worker detached; (id, argv): the id of the switch this run
    reports, and how its worker was started (None when it reports another run's switch, found in progress or
    finished since `since`)."""
    state_dir = plan["state_dir"]
    os.makedirs(state_dir, mode=0o700, exist_ok=True)
    run_id, mine = claim(plan, since)
    if not mine:
        return run_id, None
    try:
        root, is_zip = _runtime()
        if is_zip:
            keep = os.path.join(state_dir, "switch-runtime-%s.zip" % run_id)
            shutil.copyfile(root, keep + ".tmp")
            os.replace(keep + ".tmp", keep)
            root = keep
        code = ("import sys; sys.path.insert(0, %r); "
                "from ansible_collections.inferops.sglang.plugins.module_utils import _switch; _switch.main(%r)"
                % (root, plan_path(state_dir, run_id)))
        argv = [sys.executable, "-c", code]
        if os.path.isdir("/run/systemd/system") and shutil.which("systemd-run"):
            argv = ["systemd-run", "--unit", "inferops-sglang-switch-%d-%s" % (plan["port"], run_id), "--collect",
                    "--quiet", "--property=KillMode=process", "--description",
                    "inferops.sglang switch of port %d to %s" % (plan["port"], plan["unit"])] + argv
            rc, out, err = timed(run, argv, 30)
            if rc != 0:
                raise RuntimeError("systemd-run failed (rc %d): %s" % (rc, (err or out).strip()))
        else:
            with open(os.devnull, "r+") as null:
                # detached on purpose: run_command would wait for it
                subprocess.Popen(argv, stdin=null, stdout=null, stderr=null, close_fds=True,  # pylint: disable=ansible-bad-function
                                 start_new_session=True)
    except Exception as e:
        unclaim(state_dir, run_id, "the switch could not be started: %s" % e)
        raise
    return run_id, argv


def wait(state_dir, run_id, timeout, poll=0.1):
    """The outcome of switch run_id once finished (None: whichever switch runs now). TimeoutError otherwise."""
    path = os.path.join(state_dir, OUTCOME)
    deadline = time.monotonic() + timeout
    seen_at = time.monotonic()
    while True:
        out = read_json(path)
        mine = out is not None and (run_id is None or out.get("id") == run_id)
        if mine and out.get("finished"):
            return out
        if mine and out.get("pid"):
            seen_at = time.monotonic()
            if not _procfs.is_alive((out["pid"], out["starttime"])):
                out["error"] = out.get("error") or "the switch process %d ended without finishing" % out["pid"]
                return out
        elif time.monotonic() - seen_at > REPORT_WAIT:
            raise TimeoutError("the switch process never reported (see %s)" % path)
        if time.monotonic() >= deadline:
            raise TimeoutError("the switch did not finish within %.0f s; it goes on on the host (%s)" % (timeout, path))
        time.sleep(poll)
