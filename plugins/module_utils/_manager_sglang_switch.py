# -*- coding: utf-8 -*-
# Copyright: inferops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""sglang_switch: preflight, then the detached switch, waited for; then, when asked, the server it started waited
for until it serves, and the record kept. Nothing is written before the preflight passed: a refusal leaves the host
as it was."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import stat
import time

from ansible_collections.inferops.sglang.plugins.module_utils import _state_dir
from ansible_collections.inferops.sglang.plugins.module_utils._server import multinode as _multinode
from ansible_collections.inferops.sglang.plugins.module_utils._base import Base
from ansible_collections.inferops.sglang.plugins.module_utils._host import (
    files as _files, free_space as _free_space, owner as _owner, procfs as _procfs, selinux as _selinux,
    systemd as _systemd, unit as _unit, venv as _venv)
from ansible_collections.inferops.sglang.plugins.module_utils._host.command import CommandError
from ansible_collections.inferops.sglang.plugins.module_utils._host.progress import ProgressFile
from ansible_collections.inferops.sglang.plugins.module_utils._host.redact import Redactor
from ansible_collections.inferops.sglang.plugins.module_utils._server import (
    capture as _capture, family as _family, listeners as _listeners, port_units as _port_units, readiness as _readiness,
    sglang_args as _sglang_args, weight_cache as _weight_cache)
from ansible_collections.inferops.sglang.plugins.module_utils._switch import (
    launch as _switch_launch, lock as _switch_lock, outcome as _switch_outcome, preflight as _preflight,
    record as _record)
from ansible_collections.inferops.sglang.plugins.module_utils._switch.record import HISTORY_KEEP
from ansible_collections.inferops.sglang.plugins.module_utils._switch.states import (
    LAUNCHING, STARTING, Actions, Kinds, OutcomeStates, Owners, Targets)


# Room the switch needs in the state folder besides the payload's copy, the capture and the units' backups: its plan
# and outcome, the record's three files, and their temporary copies while each is replaced.
STATE_ROOM = 512 * 1024
FILE_ROOM = 16 * 1024  # and beside each of the unit's files, as much again as the file, for its temporary copy
PROGRESS_EVERY = 2.0  # seconds between two lines of progress while the call waits


def stray_problems(insp, release_strays):
    """What the strays of a preflight (inspect) keep the switch from: one that serves on a port of its own (never
    released: the message says so, and suggests no release), another user's job (released only when the operator
    lists its user), and the server's user's own when the switch may not release them."""
    def named(rows):
        return "; ".join("%d %s (%s%s)" % (s["pid"], s["cmdline"][:120], ", ".join(s["devices"]),
                                           ", serving on port %s" % ", ".join(str(x) for x in s["serves"])
                                           if s.get("serves") else "") for s in rows)
    gpus = insp["gpus"]
    serving = [s for s in insp["strays"] if s.get("serves")]
    others = [s for s in insp["strays"] if not s.get("serves") and not s.get("releasable")]
    own = [s for s in insp["strays"] if s.get("releasable")]
    out = []
    if serving:
        out.append("processes outside the server's family that serve on ports of their own hold its GPUs %s: %s. "
                   "The switch never stops a process that serves: move it to other GPUs or stop it yourself, or "
                   "give the server other GPUs" % (gpus, named(serving)))
    if others:
        out.append("processes of other users hold the server's GPUs %s: %s. The switch releases only processes of "
                   "the server's own user (%s), or of users listed in release_users (cutover_release_users)" % (
                       gpus, named(others), (insp.get("server") or {}).get("user")))
    if own and not release_strays:
        out.append("processes outside the server's family hold its GPUs %s: %s. Stop them, or allow the switch to "
                   "release them" % (gpus, named(own)))
    return out


class SglangSwitch(Base):
    """Preflight (always; alone in check mode), then the detached switch, waited for.

    run() goes through named phases, in order; each keeps on self what the later ones need, and any of them may
    end the module (fail_json, or exit_json where there is nothing to switch)."""

    progress = None  # the progress file, once the preflight passed (progress_file)
    staged_weights = None  # the weight cache daemon's unit, staged (prepare)
    weights_used = False  # the unit's server maps its weights from that daemon
    weights_running = False  # that daemon's unit runs (look)
    told_at = None  # when tell wrote its last line

    def run(self):
        self.validate()
        self.probe()
        self.prepare()
        self.look()
        self.decide()
        self.room()  # before vet: its SELinux relabel is only for a switch with no other problem
        self.vet()
        self.report_preflight()
        if self.module.check_mode or self.action == Actions.NONE:
            self.answer()
            return
        try:
            self.launch()
            self.wait_switch()
            self.ready()
            self.record()
        finally:
            if self.progress:
                self.progress.close()
        self.module.exit_json(**self.result)

    def validate(self):
        """The port and the unit (the module fails on a bad one), the port's state folder, the wait's budget, the
        unit's command."""
        p = self.params
        self.since = time.time()  # a switch of the port that finished after this is this run's too
        self.port, self.name = self.port_and_unit()
        self.unit = self.name + ".service"
        self.state_dir = _state_dir.folder(p["state_dir"], self.port)
        self.timeout = p["timeout"] if p["timeout"] is not None else p["drain"] + 120
        self.command = p["command"] or ([p["executable"]] if p["executable"] else [])
        # the command's secrets (a caller that did not mask them) are masked wherever the module's result and its
        # arguments are shown, as no_log masks an option's value; no_log on the whole command would mask every
        # word of it (a "30000" anywhere in the result)
        self.module.no_log_values.update(self.redact.secrets_of(self.command, {}))
        self.back = p["target"] == Targets.CAPTURE
        history = (p["record"] or {}).get("history", HISTORY_KEEP)
        if history < 1:
            self.fail("record.history keeps at least 1 record, not %d" % history)
        try:
            self.capture = _capture.capture_file(self.state_dir, p["capture"]) if p["capture"] else None
        except ValueError as e:
            self.fail(str(e))

    def probe(self):
        """The unit's interpreter asked for SGLang's version, and the installed SGLang's parser for its answer on the
        server's arguments: both in the background, answering while the host is looked at. Both run as the unit's
        user, with a clean environment; as root only when no other user can change the interpreter or its venv."""
        python, server_args, entry = (_sglang_args.interpreter(self.command) if self.params["target"] == Targets.UNIT
                                      else (None, None, None))
        self.python = python
        self.asked = self.parsing = None
        self.said = []  # the parser's answer, once collected
        owner = self.prober(python)
        if owner is None:
            return
        self.asked = _sglang_args.ask_version(python, owner)
        self.parsing = (_sglang_args.start(python, server_args, entry, owner=owner)
                        if python and server_args is not None else None)

    def prober(self, python):
        """Who asks the unit's interpreter: the unit's User=/Group= (the module fails on an unknown one); None, with a
        warning, when that is root and another user can change what root would run or import."""
        p = self.params
        try:
            owner = _owner.Owner.named(p["user"], p["group"])
        except KeyError:
            self.fail("the unit's User=%s or Group=%s is not known on the host" % (p["user"], p["group"] or ""))
        executable = p["executable"] or (self.command[0] if self.command else None)
        if owner.is_root and (python or executable):
            # whatever the command is (a python, a console script, a shell): nothing another user can change runs as root
            why = (_venv.distrust(python) if python else None) or (
                _owner.distrust(executable) if executable and executable != python else None)
            if why:
                self.module.warn("%s was not asked for SGLang's version nor given the server's arguments to parse: "
                                 "it would run as root, and %s. Run the unit as the user who owns the venv "
                                 "(user, group), or make the venv root's alone" % (python or executable, why))
                return None
        return owner

    def prepare(self):
        """The unit's files, when asked: compared with what is installed and verified (a unit systemd-analyze rejects
        fails the module); written only once the preflight passed (commit)."""
        p = self.params
        self.staged, self.installed, self.restart, self.taken = None, None, p["restart"], []
        weights = p.get("weights")
        self.weights = _unit.check_unit_name(weights["name"], "weights.name", self.fail) if weights else None
        # a daemon for the unit's server (its unit given); else one that may run still (its name only) is stopped
        # once the server stopped, so that the unit's server finds its GPU memory free
        self.weights_used = bool(weights and weights.get("unit"))
        self.staged_weights, self.weights_restart = None, bool(self.weights and not self.weights_used)
        if not (p["install"] and p["target"] == Targets.UNIT):
            return
        beside = {}
        if self.weights_used:
            # the daemon's unit first: the server's requires it, and is verified with it beside
            self.staged_weights = _unit.prepare(self, dict(
                name=self.weights, unit=p["weights"]["unit"], unit_dir=p["install"]["unit_dir"], environment="",
                environment_path=None, gate="", gate_path=None, sweep="", sweep_path=None, wants=[]), enabled=False)
            beside[self.weights + ".service"] = p["weights"]["unit"]
        self.staged = _unit.prepare(self, dict(p["install"], name=self.name, beside=beside), enabled=True)
        self.restart = self.restart or self.staged[0]["restart_needed"]  # what the running unit runs changed
        if self.staged_weights:
            # what the daemon runs changed: its unit, or the environment file the two units share
            env = [f for f in self.staged[1][1:] if f.path == p["install"]["environment_path"]]
            self.weights_restart = self.staged_weights[1][0].content_differs or any(f.content_differs for f in env)
            self.restart = self.restart or (self.weights_restart and self.staged_weights[0]["active_state"] in (
                "active", "activating", "reloading"))

    def staged_files(self):
        """The files the switch puts in place: the daemon's unit (with weights), then the unit's."""
        return (self.staged_weights[1] if self.staged_weights else []) + (self.staged[1] if self.staged else [])

    def look(self):
        """The preflight: what serves the port and what the switch would touch, the unit's state, and the problems
        that keep the switch from beginning."""
        p = self.params
        run = self.module.run_command
        self.look_began = time.monotonic()
        procs = _procfs.snapshot()
        pids = _listeners.listeners(self.port, procs)
        server = _listeners.main_process(pids[0], procs).pid if pids else None
        self.units = [] if self.back else _port_units.decide(
            _port_units.find(self.port, run, self.unit, server, redact=self.redact), p["existing_units"])
        insp = self.insp = _preflight.inspect(self.port, self.name, tuple(p["devices"]), procs=procs, run=run,
                                              flags=p["redact"], taken=self.taking("replace"), rank=p["rank"],
                                              gpus=p["gpus"], release_users=p["release_users"],
                                              command=None if self.back else self.command,
                                              weights=self.weights)
        if self.back:
            insp = self.insp = _preflight.vacant(insp, procs)
        state = _systemd.show(run, self.unit)
        # a weight cache daemon of the unit that runs now: its stop is a step of the switch only then
        self.weights_running = bool(self.weights) and _systemd.show(run, self.weights + ".service", (
            "ActiveState",)).get("ActiveState") in ("active", "activating", "reloading", "deactivating")
        problems = self.problems = list(insp["problems"])
        refused = [u["summary"] for u in self.units if u["action"] == "refuse"]
        if refused:
            problems.append(_port_units.refusal(self.port, refused))
        problems.extend(stray_problems(insp, p["release_strays"]))
        for w in insp["warnings"]:
            self.module.warn(w)
        why = _multinode.refusal(self.port, self.command, "the unit's command for port", rank=p["rank"])
        if why and self.command and not self.back:
            problems.append(why)
        problems += self.identities(server, procs)
        # a rollback to the unit's files as they served before a failed restart needs none (a unit made from
        # cutover_command alone never had a capture)
        if self.back and not os.path.exists(_state_dir.capture(self.state_dir)) and not (
                p["previous_of"] and self.previous_unit(p["previous_of"])):
            problems.append("there is no capture in %s: nothing to go back to" % self.state_dir)
        if state.get("LoadState") != "loaded" and not self.module.check_mode and not self.back and not self.staged:
            problems.append("%s is not installed (LoadState %s)" % (self.unit, state.get("LoadState")))
        self.active = state.get("ActiveState")

    def identities(self, server, procs):
        """Who holds the port (a server outside the unit: what the switch stops) and the capture given (what a unit or a
        rollback would run again) are what they say they are: one uid and gid each, argv[0] the program that runs
        (_capture.identity_problems); each problem names what it found."""
        problems = []
        if server is not None and not self.back and self.insp.get("owner") == Owners.ADHOC:
            live = _capture.capture(server)
            if live:
                problems += _capture.identity_problems(live, "the port's holder")
        if self.capture is not None:
            cap = json.loads(self.capture.content)
            for what, c in (("the captured server", cap), ("its captured wrapper loop", cap.get("wrapper"))):
                problems += _capture.identity_problems(c, what) if c else []
        return [self.redact(x) for x in problems]

    def decide(self):
        """The action (states.Actions): join (a switch of the port in progress: this run reports it), rollback, switch,
        restart, start, or none."""
        owner = self.insp["owner"]
        self.joining = _switch_outcome.current(self.state_dir)
        if self.joining:
            self.action = Actions.JOIN
        elif self.back:
            self.action = Actions.NONE if owner == Owners.ADHOC else Actions.ROLLBACK
        elif not self.params["start"]:  # stop what serves the port (or the unit, still starting), start nothing
            running = owner is not None or self.active in ("active", "activating", "reloading")
            self.action = Actions.STOP if running else Actions.NONE
        elif owner == Owners.ADHOC:
            self.action = Actions.SWITCH
        elif owner == Owners.UNIT:
            self.action = Actions.RESTART if self.restart else Actions.NONE
        elif self.active in ("active", "activating", "reloading") and not self.restart:
            self.action = Actions.NONE  # loading: nothing listens yet
        else:
            self.action = Actions.START

    def vet(self):
        """Where the unit is about to run: SGLang's version, its answer on the server's arguments and the SELinux
        label of the unit's executable, each a problem when wrong. Otherwise the questions asked are ended."""
        p = self.params
        self.version = self.selinux_decision = None
        if self.action in STARTING:  # the answers count only when the unit is about to run
            self.version, why = _sglang_args.version(p["executable"] or self.python, self.asked)
            self.problems += why
            if self.weights_used and not self.back and self.command:
                self.problems += _weight_cache.problems(self.command, self.version)
            if self.parsing and not why:  # the installed SGLang parses them: a bad flag stops here
                self.said = self.said or [self.parsed(self.python, self.parsing)]
                self.problems += [x for x in self.said if x]
        else:
            for proc in (self.asked, self.parsing):
                if proc and not isinstance(proc, str) and proc.poll() is None:
                    _owner.kill(proc)
        if p["target"] == Targets.UNIT and self.command and self.action in STARTING:
            self.selinux_decision = self.selinux(self.command[0] if self.command else None, self.problems)

    def room(self):
        """Where the switch is about to write: the state folder and the unit's folders writable, with room for what
        goes there (the payload's copy, the capture, the units' backups, the plan, the outcome, the record; the
        unit's files), each a problem otherwise."""
        if self.action not in LAUNCHING:
            return
        capture = self.capture if self.keeps_capture() else None
        state = (_switch_launch.runtime_bytes() + STATE_ROOM + (len(capture.content) if capture else 0)
                 + sum(os.path.getsize(f) for u in self.units if u["action"] in ("replace", "rewrite")
                       for f in u["files"] if os.path.exists(f)))
        needs = [("the state folder", self.state_dir, state)]
        for f in self.staged_files():
            if f.differs:
                needs.append(("the folder", os.path.dirname(f.path), 2 * len(f.content.encode("utf-8")) + FILE_ROOM))
        self.problems += _free_space.problems(needs)

    def report_preflight(self):
        """The preflight's result (what the module returns from here on), with what the switch does to each unit that
        could serve the port (and, in diff mode, how each would change); the module fails on a problem when it would
        act, or refuses a unit, having changed nothing."""
        units = self.units
        result = self.result = dict(
            changed=self.action != Actions.NONE, action=self.action, port=self.port, unit=self.unit, preflight=self.insp,
            sglang_version=self.version, unit_state=self.active, problems=self.problems, units=units,
            preflight_seconds=round(time.monotonic() - self.look_began, 3), selinux=self.selinux_decision)
        if self.staged_weights:
            weights = self.staged_weights[0]
            result.setdefault("diff", []).extend(weights.pop("diff", []))
            result.update(weights_installed=weights, changed=result["changed"] or weights["changed"])
        if self.staged:
            installed = self.staged[0]
            result.setdefault("diff", []).extend(installed.pop("diff", []))
            result.update(installed=installed, changed=result["changed"] or installed["changed"])
            for u in units:
                if u["action"] == "rewrite":  # what changes in the operator's own file of the managed name
                    u["changed"] = _port_units.changes(_port_units.read_text(u["path"]), self.staged[1][0].content,
                                                       self.redact)
        acted = [u for u in units if u["action"] == "rewrite" or u["action"] == "replace" and (
            u["unit_file_state"] in _port_units.ENABLED or u["active_state"] in _port_units.RUNNING)]
        result["changed"] = result["changed"] or bool(acted)
        if self.module._diff and units:  # pylint: disable=protected-access
            result.setdefault("diff", []).extend(dict(
                before_header=u["path"], after_header="%s: %s" % (u["path"], u["action"]),
                before=u["summary"] + "\n", after="%s: %s: %s\n" % (u["unit"], u["action"], u["does"]))
                for u in units if u["action"] != "rewrite")
        if not result.get("diff"):
            result.pop("diff", None)
        if self.problems and (self.action in LAUNCHING or any(u["action"] == "refuse" for u in units)):
            self.failed("preflight failed, nothing was touched: " + " | ".join(self.problems), result, changed=False)

    def answer(self):
        """In check mode, or with nothing to switch: what would be done (or why nothing is), the record a finished
        switch's run did not keep kept now, and the module's exit."""
        result, action, port = self.result, self.action, self.port
        result["msg"] = {Actions.NONE: "%s: nothing to switch" % ("the captured command serves port %d" % port
                                                                  if self.back else "%s serves port %d" % (self.unit, port))
                         if self.params["start"] else "nothing serves port %d: nothing to stop" % port,
                         Actions.JOIN: "a switch of port %d is in progress" % port}.get(
            action, "would %s: %d process(es) of the family, GPUs %s, then %s" % (
                action, len(self.insp["family"]), self.insp["gpus"],
                "start nothing" if action == Actions.STOP else "start " + self.unit))
        if action == Actions.NONE and not self.module.check_mode:
            self.commit()
            self.late_record(result, self.state_dir, self.unit)
        self.module.exit_json(**result)

    def launch(self):
        """The switch of the port claimed and its worker started detached; or the switch another run claimed (in
        progress, or finished since this run began), joined."""
        p = self.params
        self.progress_file()
        self.run_id = self.joining
        if self.action == Actions.JOIN:
            self.result["run_id"] = self.run_id
            return
        plan = dict(id="%d-%d" % (int(self.since), os.getpid()), action=self.action, target=p["target"], port=self.port,
                    unit=self.unit, unit_name=self.name, state_dir=self.state_dir, drain=p["drain"],
                    release_strays=p["release_strays"], devices=list(p["devices"]), gpus=self.insp["gpus"],
                    rank=p["rank"], given_gpus=p["gpus"], release_users=p["release_users"])
        if self.weights_used or self.weights_running:
            plan["weights"] = dict(name=self.weights, unit=self.weights + ".service",
                                   restart=self.weights_restart and self.weights_running)
        self.committed = False

        if self.back and p["previous_of"]:
            plan["previous"] = self.previous_unit(p["previous_of"])
        if self.back and p["unit_served"] is not None:
            plan["unit_served"] = p["unit_served"]

        def prepared():
            """Under the lock, the claim about to be written: what the switch needs put in place, then its plan."""
            self.commit(plan["id"])
            return dict(plan, units=[u["unit"] for u in self.taken],
                        record=_record.switch_plan(p["record"], self.state_dir, self.insp, self.version,
                                                   self.installed, self.taken))
        try:
            self.run_id, argv = _switch_launch.launch(plan, self.since, self.module.run_command, prepare=prepared)
        except Exception as e:  # pylint: disable=broad-except
            self.failed("could not start the switch, nothing was %s: %s" % (
                "stopped" if self.committed else "touched", e), self.result,
                changed=self.result["changed"] if self.committed else False)
        if argv:
            self.result["launched"] = argv[:4]
        else:
            self.action = self.result["action"] = Actions.JOIN
        self.result["run_id"] = self.run_id

    def progress_file(self):
        """With progress: the file where the call says where the switch is while it waits (tell), opened before the
        switch begins; its lines masked of the wait's key and of the command's and the redact flags' secrets."""
        p = self.params
        if not p["progress"]:
            return
        key = (p["wait"] or {}).get("api_key")
        redact = Redactor(flags=p.get("redact") or (), values=self.redact.secrets_of(self.command, {}) + [key or ""])
        try:
            self.progress = ProgressFile(p["progress"], redact)
        except OSError as e:
            self.failed("the progress file %s could not be made, nothing was touched: %s" % (p["progress"], e),
                        self.result, changed=False)

    def tell(self, outcome):
        """A line of progress, at most one every PROGRESS_EVERY s (_switch.outcome.progress_line): the phase, the
        seconds since the call began and, once the unit started, its last log line. Returns None (a check of the
        wait's that never stops it); a line that cannot be written is left out."""
        now = time.monotonic()
        if self.progress is None or self.told_at is not None and now - self.told_at < PROGRESS_EVERY:
            return None
        self.told_at = now
        log = ("\n".join(_systemd.journal(self.module.run_command, self.unit, 1))
               if (outcome or {}).get("started_at") and not self.back else "")
        try:
            self.progress.say(_switch_outcome.progress_line(outcome, now - self.t0, log, self.progress.redact),
                              seconds=round(now - self.t0, 1))
        except OSError:
            pass
        return None

    def commit(self, run_id=None):
        """Once the preflight passed (under the switch's lock when a switch follows): the units that could serve the
        port taken over (backed up, disabled, stopped unless the switch stops them), the unit's files as they served
        kept when a restart changes them (previous-unit.json, 0600: a rollback of this run, run_id, puts them back),
        the unit put in place (written, enabled, daemon reloaded), and the capture of what ran kept where
        keeps_capture says (capture.json, 0600). What changed goes into the result."""
        p, result = self.params, self.result
        self.committed = True
        if self.action in LAUNCHING and not self.back:
            self.keep_previous(run_id)
        acting = [u for u in self.units if u["action"] in ("replace", "rewrite")]
        try:
            taken = _port_units.take_over(acting, self.state_dir, self.module.run_command,
                                          installed_at=self.staged[1][0].path if self.staged else None)
        except (RuntimeError, OSError, CommandError) as e:
            self.failed(str(e), result)
        for t in taken:
            t["changed"] = next((u.get("changed") for u in acting if u["unit"] == t["unit"]), None)
        self.taken = taken
        result["units_taken"] = taken
        if self.staged_weights:  # before the unit's: its daemon-reload then reads both
            result["weights_installed"] = _unit.put(self, self.staged_weights)
        if self.staged:
            self.installed = result["installed"] = _unit.put(self, self.staged)
        if self.keeps_capture():
            self.write_files([self.capture], **result)

    def keeps_capture(self):
        """Whether the capture given (what ran before the cutover) is kept: for a switch of an ad-hoc server, a take-over
        of the operator's own unit of the unit's name, and with start=false (one rank of a multi-node server) even once
        that server has ended since the discovery that gave it - rank 0's stop ends the other ranks'."""
        return bool(self.capture) and (self.action == Actions.SWITCH or not self.params["start"]
                                       or bool(self.taking("rewrite")))

    def keep_previous(self, run_id):
        """For a restart of the serving unit that changes its files: those files as they are (a file the restart
        adds: none), kept for a rollback of run_id; for any other switch, no earlier unit to go back to. Not when
        the switch takes over units (the operator's own file of the unit's name among them): their rollback puts
        those back (units.json)."""
        path = _state_dir.previous(self.state_dir)
        changed = [f for f in self.staged_files() if f.differs]
        taking = [u for u in self.units if u["action"] in ("replace", "rewrite")]
        if not (self.action == Actions.RESTART and self.insp["owner"] == Owners.UNIT and changed and not taking):
            if os.path.lexists(path):
                os.unlink(path)
            return
        files = []
        for f in changed:
            st = os.lstat(f.path) if os.path.lexists(f.path) else None
            files.append(dict(path=f.path, mode=stat.S_IMODE(st.st_mode) if st else None,
                              text=_port_units.read_text(f.path) if st else None))
        keep = _files.File(path, json.dumps(dict(run=run_id, unit=self.unit, time=time.time(), files=files),
                                            indent=1, sort_keys=True), 0o600, 0, 0, dir_mode=0o700)
        self.write_files([keep], **self.result)

    def previous_unit(self, run_id):
        """The path of the unit's files kept before the restart run_id, when they were kept for that run, else None
        (the rollback then starts the captured command)."""
        path = _state_dir.previous(self.state_dir)
        kept = _files.read_json(path) or {}
        return path if kept.get("run") == run_id and kept.get("unit") == self.unit else None

    def wait_switch(self):
        """The switch's outcome, waited for; the module fails with the step it stopped at."""
        result, action = self.result, self.action
        try:
            outcome = self.outcome = _switch_outcome.wait(self.state_dir, self.run_id, self.timeout, tick=self.tell)
        except _switch_outcome.NeverReported as e:  # given up: a late start of its process switches nothing
            _switch_lock.unclaim(self.state_dir, self.run_id, str(e))
            if (result.get("launched") or [None])[0] == "systemd-run":  # what its process said before it ended
                result["log_lines"] = _systemd.log_lines(self.module.run_command, self.redact,
                                                         _switch_launch.worker_unit(self.port, self.run_id), lines=10)
            self.fail(str(e), **result)
        except TimeoutError as e:
            self.fail(str(e), **result)
        result.update(_switch_outcome.summary(outcome), outcome=outcome, elapsed=self.elapsed())
        if action == Actions.JOIN:
            result["msg"] = "joined the switch %s of port %d in progress" % (outcome.get("id"), self.port)
        if _switch_outcome.state(outcome) == OutcomeStates.FAILED:
            self.fail("the switch stopped at %s: %s" % (
                (outcome.get("steps") or [{}])[-1].get("step", "its start"), outcome["error"]), **result)
        result["msg"] = "%s%s: %s" % (action, " of " + str(outcome.get("id")) if action == Actions.JOIN else "", ", ".join(
            "%s %.2f s%s" % (s["step"], s["seconds"], " (%s)" % s["escalation"] if s.get("escalation") else "")
            for s in result["steps"]) or outcome.get("note", ""))

    def ready(self):
        """When asked, what the switch started waited for until it serves."""
        if self.params["wait"] and self.outcome.get("started_at"):
            self.serve(self.result, self.outcome, self.unit, self.state_dir, self.back)

    def record(self):
        """When asked, the record kept from the switch's plan (by this run, unless another that reports the same
        switch kept it first)."""
        outcome = self.outcome
        plan = _files.read_json(_state_dir.plan(self.state_dir, outcome["id"])) or {}
        if self.params["record"] and plan.get("record") and outcome.get("started_at"):
            self.keep_record(self.result, outcome, plan["record"], plan.get("target") == Targets.CAPTURE, self.state_dir)

    def selinux(self, executable, problems):
        """On an enforcing host, the unit's executable labelled so systemd may run it (semanage and restorecon; not
        in check mode, nor when the preflight found other problems), or a problem that says what to run: before
        anything is stopped. Returns the decision."""
        decision = _selinux.check(executable)
        if decision["action"] == _selinux.Decisions.STOP:
            problems.append(decision["msg"])
        elif decision["action"] == _selinux.Decisions.FIX and problems:  # a relabel is for good: for a switch about to run
            decision["fixed"] = False
            decision["msg"] += " (not done: the preflight found other problems)"
        elif decision["action"] == _selinux.Decisions.FIX and not self.module.check_mode:
            why = _selinux.fix(self.module.run_command, decision)
            decision["fixed"] = why is None
            if why:
                problems.append("%s; %s" % (decision["msg"], why))
        return decision

    def late_record(self, result, state_dir, unit):
        """A finished switch whose record was never kept (its controller was interrupted): keep it now, with the
        switch's own timings and, for the unit, the load systemd saw (start to active: the gate passed)."""
        outcome = _files.read_json(_state_dir.outcome(state_dir)) or {}
        plan = _files.read_json(_state_dir.plan(state_dir, outcome.get("id"))) or {}
        if not (self.params["record"] and plan.get("record") and _switch_outcome.state(outcome) == OutcomeStates.FINISHED
                and outcome.get("started_at") and "recorded" not in outcome):
            return
        back = plan.get("target") == Targets.CAPTURE
        result.update(_switch_outcome.summary(outcome), elapsed=outcome.get("seconds"))
        load = None
        if not back:
            keys = ("ExecMainStartTimestampMonotonic", "ActiveEnterTimestampMonotonic")
            times = _systemd.show(self.module.run_command, unit, keys)
            start, active = [int(times.get(k) or 0) for k in keys]
            if 0 < start <= active:
                load = round((active - start) / 1e6, 3)
        self.keep_record(result, outcome, plan["record"], back, state_dir, load)
        if result.get("record_written"):
            result["changed"] = True
            result["msg"] += "; the record of switch %s (%s), not kept by its run, was kept now" % (
                outcome["id"], time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(outcome.get("began", 0))))

    def serve(self, result, outcome, unit, state_dir, back):
        """Wait for what the switch started until it serves (failing fast when it dies); the wait's answers go
        into result. A server that cannot serve fails the module with wait_failed."""
        w = self.params["wait"]
        if w["api_key"]:
            self.redact = Redactor(flags=self.params.get("redact") or (), values=[w["api_key"]])
        pid = outcome.get("pid_started")
        try:
            server = _readiness.Server(w["url"], api_key=w["api_key"], owner=lambda sock: _listeners.peer_problem(
                sock, pid=pid) if back else _listeners.peer_problem(sock, unit=unit))
        except ValueError as e:
            self.failed(str(e), result)
        if back and outcome.get("unit_started"):  # the rollback started the operator's unit that served before
            unit, back = outcome["unit_started"], False
        what = "the captured command" if back else unit
        log_file = None
        # ready means: the ready path answers 200, the listener on the port is what was started (not a server
        # that happens to hold the port), and, for the unit, systemd says active (its readiness gate passed). The
        # switch freed the port: another process holding it now means what was started cannot bind it
        if back:
            checks = [_procfs.process_alive(pid, _procfs.starttime(pid or 0)), _family.SchedulerWatch(pid=pid).problem]
            gates = [lambda: _listeners.listener_problem(server.port, pid=pid)]
            whose = dict(pid=pid)
            log_file = (_files.read_json(_state_dir.capture(state_dir)) or {}).get("stdout")
        else:
            try:
                watch = _systemd.UnitWatch(self.module.run_command, unit)
            except Exception as e:  # pylint: disable=broad-except
                self.failed("cannot watch unit %s: %s" % (unit, e), result, wait_failed=True)
            checks = [watch.problem, _family.SchedulerWatch(unit=unit).problem]
            if self.weights_used:  # the daemon the unit requires: its failure fails the unit's start
                try:
                    checks.append(_systemd.UnitWatch(self.module.run_command, self.weights + ".service").problem)
                except Exception as e:  # pylint: disable=broad-except
                    self.failed("cannot watch unit %s.service: %s" % (self.weights, e), result, wait_failed=True)
            whose = dict(unit=unit)
            gates = [lambda: _listeners.listener_problem(server.port, unit=unit), watch.active]
        if server.is_local():  # first: a port another process holds is the cause of what the unit's state shows then
            checks.insert(0, lambda: _listeners.squatter(server.host, server.port, **whose))
        checks.append(lambda: self.tell(outcome))  # where it is, while it loads: the progress file's lines
        try:
            res = _readiness.wait(server, timeout=w["timeout"], models=True, generate=w["generate"], checks=checks,
                                  gates=gates)
            if w["model"] and res.get("model") != w["model"]:
                raise _readiness.NotReady("%s serves %s, not %s" % (what, res.get("model"), w["model"]), res)
        except _readiness.NotReady as e:
            result.update(e.result, url=server.url, wait_seconds=e.result.pop("elapsed", None),
                          log_lines=_systemd.log_lines(self.module.run_command, self.redact, None if back else unit, log_file))
            self.failed("%s; then %s did not serve: %s" % (result["msg"], what, self.redact(str(e))), result,
                        wait_failed=True)
        res["wait_seconds"] = res.pop("elapsed")
        result.update(res, url=server.url)
        if self.weights_used and not back:  # how this start had its weights: the record's figures
            result["weight_cache"] = _weight_cache.reading(self.module.run_command, unit, self.weights + ".service")
        result["msg"] += "; %s ready after %.1f s%s" % (what, res["ready_after"], ", serving %s" % res["model"] if res.get("model") else "")

    def keep_record(self, result, outcome, given, back, state_dir, load=None):
        """The record (_record.switch_record: given is the switch's plan's, load the load time where no wait of this
        run saw it), written where given["dir"] says (_record.Keep, cutover_record's writer too), by one run only
        (nothing in check mode)."""
        rec = _record.switch_record(given, outcome, result, back, load)
        try:
            keep = _record.Keep(given["dir"], Kinds.ROLLBACK if back else Kinds.CUTOVER, rec,
                                given.get("history") or HISTORY_KEEP) if given["dir"] else None
            result["report"] = _record.report(rec)
        except ValueError as e:
            self.failed(str(e), result)
        result["record"] = rec
        result["record_written"] = []
        claim = _switch_lock.RecordClaim(state_dir, outcome.get("id"))
        with claim as mine:
            if not mine:  # another run that reported this switch kept it
                return
            if keep:
                result["record_written"] = keep.written
                try:
                    result["record_removed"] = keep.write()
                except _record.WriteError as e:
                    self.failed(str(e), result)
                if keep.warning:
                    self.module.warn(keep.warning)
            claim.done(result["record_written"])

    def taking(self, action):
        """The names of the units the switch takes over with action."""
        return [u["unit"] for u in self.units if u["action"] == action]

    def parsed(self, python, parsing):
        """The parser's refusal, or None (a warning when it could not check)."""
        said = _sglang_args.answer(parsing, python)
        if isinstance(said, _sglang_args.NotChecked):
            self.module.warn(said)
            return None
        return said
