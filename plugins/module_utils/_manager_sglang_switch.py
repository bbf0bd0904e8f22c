# -*- coding: utf-8 -*-
# Copyright: inferops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""sglang_switch: preflight, then the detached switch, waited for; then, when asked, the server it started waited
for until it serves, and the record kept."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import subprocess
import time

from ansible_collections.inferops.sglang.plugins.module_utils import (
    _discover, _files, _preflight, _procfs, _readiness, _record, _selinux, _sglang_args, _switch_launch, _switch_lock,
    _switch_outcome, _systemd, _unit)
from ansible_collections.inferops.sglang.plugins.module_utils._base import Base
from ansible_collections.inferops.sglang.plugins.module_utils._redact import Redactor


_FIND_SGLANG = ("import importlib.util, importlib.metadata as m, sys\n"
                "if not importlib.util.find_spec('sglang'): sys.exit(3)\n"
                "print(m.version('sglang'))\n")


class SglangSwitch(Base):
    """Preflight (always; alone in check mode), then the detached switch, waited for.

    run() goes through named phases, in order; each keeps on self what the later ones need, and any of them may
    end the module (fail_json, or exit_json where there is nothing to switch)."""

    def run(self):
        self.validate()
        self.probe()
        self.install()
        self.look()
        self.decide()
        self.vet()
        self.report_preflight()
        if self.module.check_mode or self.action == "none":
            self.answer()
            return
        self.launch()
        self.wait_switch()
        self.ready()
        self.record()
        self.module.exit_json(**self.result)

    def validate(self):
        """The port and the unit (the module fails on a bad one), the port's state folder, the wait's budget, the
        unit's command."""
        p = self.params
        self.since = time.time()  # a switch of the port that finished after this is this run's too
        self.port, self.name = self.port_and_unit()
        self.unit = self.name + ".service"
        self.state_dir = os.path.join(p["state_dir"], str(self.port))
        self.timeout = p["timeout"] if p["timeout"] is not None else p["drain"] + 120
        self.command = p["command"] or ([p["executable"]] if p["executable"] else [])
        self.back = p["target"] == "capture"

    def probe(self):
        """The unit's interpreter asked for SGLang's version, and the installed SGLang's parser for its answer on the
        server's arguments: both in the background, answering while the host is looked at."""
        python, server_args, entry = (_sglang_args.interpreter(self.command) if self.params["target"] == "unit"
                                      else (None, None, None))
        self.python = python
        self.asked = self.ask_version(python)
        self.parsing = _sglang_args.start(python, server_args, entry) if python and server_args is not None else None
        self.said = []  # the parser's answer, once collected

    def install(self):
        """The unit installed and enabled, when asked: verified before anything is stopped; nothing written in check
        mode. A command SGLang refuses is not even installed."""
        p = self.params
        self.installed, self.restart = None, p["restart"]
        if not (p["install"] and p["target"] == "unit"):
            return
        if self.parsing and not self.module.check_mode and _sglang_args.command_changes(
                p["install"]["unit"], os.path.join(p["install"]["unit_dir"], self.unit)):
            self.said.append(self.parsed(self.python, self.parsing))
            if self.said[0]:
                self.fail("preflight failed, nothing was touched: " + self.said[0], action="none", port=self.port,
                          unit=self.unit, problems=self.said)
        self.installed = _unit.install(self, dict(p["install"], name=self.name), enabled=True)
        self.restart = self.restart or self.installed["restart_needed"]  # what the running unit runs changed

    def look(self):
        """The preflight: what serves the port and what the switch would touch, the unit's state, and the problems
        that keep the switch from beginning."""
        p = self.params
        run = self.module.run_command
        self.look_began = time.monotonic()
        insp = self.insp = _preflight.inspect(self.port, self.name, tuple(p["devices"]), run=run, flags=p["redact"])
        state = _systemd.show(run, self.unit)
        problems = self.problems = list(insp["problems"])
        if insp["strays"] and not p["release_strays"]:
            problems.append("processes outside the server's family hold its GPUs %s: %s. Stop them, or allow the "
                            "switch to release them" % (insp["gpus"], "; ".join(
                                "%d %s (%s)" % (s["pid"], s["cmdline"][:120], ", ".join(s["devices"]))
                                for s in insp["strays"])))
        if self.back and not os.path.exists(os.path.join(self.state_dir, "capture.json")):
            problems.append("there is no capture in %s: nothing to go back to" % self.state_dir)
        if state.get("LoadState") != "loaded" and not self.module.check_mode and not self.back:
            problems.append("%s is not installed (LoadState %s)" % (self.unit, state.get("LoadState")))
        self.active = state.get("ActiveState")

    def decide(self):
        """The action: join (a switch of the port in progress: this run reports it), rollback, switch, restart,
        start, or none."""
        owner = self.insp["owner"]
        self.joining = _switch_outcome.current(self.state_dir)
        if self.joining:
            self.action = "join"
        elif self.back:
            self.action = "none" if owner == "adhoc" else "rollback"
        elif owner == "adhoc":
            self.action = "switch"
        elif owner == "unit":
            self.action = "restart" if self.restart else "none"
        elif self.active in ("active", "activating", "reloading") and not self.restart:
            self.action = "none"  # loading: nothing listens yet
        else:
            self.action = "start"

    def vet(self):
        """Where the unit is about to run: SGLang's version, its answer on the server's arguments and the SELinux
        label of the unit's executable, each a problem when wrong. Otherwise the questions asked are ended."""
        p = self.params
        self.version = self.selinux_decision = None
        if self.action not in ("none", "join"):  # the answers count only when the unit is about to run
            self.version, why = self.sglang_version(p["executable"] or self.python, self.asked)
            self.problems += why
            if self.parsing and not why:  # the installed SGLang parses them: a bad flag stops here
                self.said = self.said or [self.parsed(self.python, self.parsing)]
                self.problems += [x for x in self.said if x]
        else:
            for proc in (self.asked, self.parsing):
                if proc and not isinstance(proc, str) and proc.poll() is None:
                    proc.kill()
                    proc.communicate()
        if p["target"] == "unit" and self.command and self.action not in ("none", "join"):
            self.selinux_decision = self.selinux(self.command[0] if self.command else None, self.problems)

    def report_preflight(self):
        """The preflight's result (what the module returns from here on); the module fails on a problem when it
        would act."""
        result = self.result = dict(
            changed=self.action != "none", action=self.action, port=self.port, unit=self.unit, preflight=self.insp,
            sglang_version=self.version, unit_state=self.active, problems=self.problems,
            preflight_seconds=round(time.monotonic() - self.look_began, 3), selinux=self.selinux_decision)
        if self.installed:
            if "diff" in self.installed:
                result["diff"] = self.installed.pop("diff")
            result.update(installed=self.installed, changed=result["changed"] or self.installed["changed"])
        if self.problems and self.action not in ("none", "join"):
            self.fail("preflight failed, nothing was stopped: " + " | ".join(self.problems), **result)

    def answer(self):
        """In check mode, or with nothing to switch: what would be done (or why nothing is), the record a finished
        switch's run did not keep kept now, and the module's exit."""
        result, action, port = self.result, self.action, self.port
        result["msg"] = {"none": "%s: nothing to switch" % ("the captured command serves port %d" % port if self.back
                                                            else "%s serves port %d" % (self.unit, port)),
                         "join": "a switch of port %d is in progress" % port}.get(
            action, "would %s: %d process(es) of the family, GPUs %s, then start %s" % (
                action, len(self.insp["family"]), self.insp["gpus"], self.unit))
        if action == "none" and not self.module.check_mode:
            self.late_record(result, self.state_dir, self.unit)
        self.module.exit_json(**result)

    def launch(self):
        """The switch of the port claimed and its worker started detached; or the switch another run claimed (in
        progress, or finished since this run began), joined."""
        p = self.params
        self.run_id = self.joining
        if self.action == "join":
            self.result["run_id"] = self.run_id
            return
        plan = dict(id="%d-%d" % (int(self.since), os.getpid()), action=self.action, target=p["target"], port=self.port,
                    unit=self.unit, unit_name=self.name, state_dir=self.state_dir, drain=p["drain"],
                    release_strays=p["release_strays"], devices=list(p["devices"]),
                    record=_record.switch_plan(p["record"], self.insp, self.version, self.installed))
        try:
            self.run_id, argv = _switch_launch.launch(plan, self.since, self.module.run_command)
        except Exception as e:  # pylint: disable=broad-except
            self.fail("could not start the switch, nothing was stopped: %s" % e, **self.result)
        if argv:
            self.result["launched"] = argv[:4]
        else:
            self.action = self.result["action"] = "join"
        self.result["run_id"] = self.run_id

    def wait_switch(self):
        """The switch's outcome, waited for; the module fails with the step it stopped at."""
        result, action = self.result, self.action
        try:
            outcome = self.outcome = _switch_outcome.wait(self.state_dir, self.run_id, self.timeout)
        except TimeoutError as e:
            self.fail(str(e), **result)
        result.update(_switch_outcome.summary(outcome), outcome=outcome, elapsed=self.elapsed())
        if action == "join":
            result["msg"] = "joined the switch %s of port %d in progress" % (outcome.get("id"), self.port)
        if outcome.get("error"):
            self.fail("the switch stopped at %s: %s" % (
                (outcome.get("steps") or [{}])[-1].get("step", "its start"), outcome["error"]), **result)
        result["msg"] = "%s%s: %s" % (action, " of " + str(outcome.get("id")) if action == "join" else "", ", ".join(
            "%s %.2f s" % (s["step"], s["seconds"]) for s in result["steps"]) or outcome.get("note", ""))

    def ready(self):
        """When asked, what the switch started waited for until it serves."""
        if self.params["wait"] and self.outcome.get("started_at"):
            self.serve(self.result, self.outcome, self.unit, self.state_dir, self.back)

    def record(self):
        """When asked, the record kept from the switch's plan (by this run, unless another that reports the same
        switch kept it first)."""
        outcome = self.outcome
        plan = _files.read_json(_switch_outcome.plan_path(self.state_dir, outcome["id"])) or {}
        if self.params["record"] and plan.get("record") and outcome.get("started_at"):
            self.keep_record(self.result, outcome, plan["record"], plan.get("target") == "capture", self.state_dir)

    def selinux(self, executable, problems):
        """On an enforcing host, the unit's executable labelled so systemd may run it (semanage and restorecon; not
        in check mode), or a problem that says what to run: before anything is stopped. Returns the decision."""
        decision = _selinux.check(executable)
        if decision["action"] == "stop":
            problems.append(decision["msg"])
        elif decision["action"] == "fix" and not self.module.check_mode:
            why = _selinux.fix(self.module.run_command, decision)
            decision["fixed"] = why is None
            if why:
                problems.append("%s; %s" % (decision["msg"], why))
        return decision

    def late_record(self, result, state_dir, unit):
        """A finished switch whose record was never kept (its controller was interrupted): keep it now, with the
        switch's own timings and, for the unit, the load systemd saw (start to active: the gate passed)."""
        outcome = _files.read_json(_switch_outcome.outcome_path(state_dir)) or {}
        plan = _files.read_json(_switch_outcome.plan_path(state_dir, outcome.get("id"))) or {}
        if not (self.params["record"] and plan.get("record") and outcome.get("finished") and not outcome.get("error")
                and outcome.get("started_at") and "recorded" not in outcome):
            return
        back = plan.get("target") == "capture"
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
        try:
            server = _readiness.Server(w["url"], api_key=w["api_key"])
        except ValueError as e:
            self.failed(str(e), result)
        what = "the captured command" if back else unit
        log_file = None
        # ready means: the ready path answers 200, the listener on the port is what was started (not a server
        # that happens to hold the port), and, for the unit, systemd says active (its readiness gate passed)
        if back:
            pid = outcome.get("pid_started")
            checks = [_procfs.process_alive(pid, _procfs.starttime(pid or 0)), _discover.SchedulerWatch(pid=pid).problem]
            gates = [lambda: _discover.listener_problem(server.port, pid=pid)]
            log_file = (_files.read_json(os.path.join(state_dir, "capture.json")) or {}).get("stdout")
        else:
            try:
                watch = _systemd.UnitWatch(self.module.run_command, unit)
            except Exception as e:  # pylint: disable=broad-except
                self.failed("cannot watch unit %s: %s" % (unit, e), result, wait_failed=True)
            checks = [watch.problem, _discover.SchedulerWatch(unit=unit).problem]
            gates = [lambda: _discover.listener_problem(server.port, unit=unit), watch.active]
        try:
            res = _readiness.wait(server, timeout=w["timeout"], models=True, generate=w["generate"], checks=checks,
                                  gates=gates)
            if w["model"] and res.get("model") != w["model"]:
                raise _readiness.NotReady("%s serves %s; %s was served before" % (what, res.get("model"), w["model"]), res)
        except _readiness.NotReady as e:
            result.update(e.result, url=server.url, wait_seconds=e.result.pop("elapsed", None),
                          log_lines=_systemd.log_lines(self.module.run_command, self.redact, None if back else unit, log_file))
            self.failed("%s; then %s did not serve: %s" % (result["msg"], what, self.redact(str(e))), result,
                        wait_failed=True)
        res["wait_seconds"] = res.pop("elapsed")
        result.update(res, url=server.url)
        result["msg"] += "; %s ready after %.1f s%s" % (what, res["ready_after"], ", serving %s" % res["model"] if res.get("model") else "")

    def keep_record(self, result, outcome, given, back, state_dir, load=None):
        """The record (_record.switch_record: given is the switch's plan's, load the load time where no wait of this
        run saw it), written where given["dir"] says, by one run only (nothing in check mode)."""
        rec = _record.switch_record(given, outcome, result, back, load)
        try:
            files = _record.files(given["dir"], "rollback" if back else "cutover", rec) if given["dir"] else []
            result["report"] = _record.report(rec)
        except ValueError as e:
            self.failed(str(e), result)
        result["record"] = rec
        result["record_written"] = []
        claim = _switch_lock.RecordClaim(state_dir, outcome.get("id"))
        with claim as mine:
            if not mine:  # another run that reported this switch kept it
                return
            result["record_written"] = [f.path for f in files if f.differs]
            self.write_files(files, **result)
            claim.done(result["record_written"])

    def parsed(self, python, parsing):
        """The parser's refusal, or None (a warning when it could not check)."""
        said = _sglang_args.answer(parsing, python)
        if isinstance(said, _sglang_args.NotChecked):
            self.module.warn(said)
            return None
        return said

    @staticmethod
    def ask_version(exe):
        """Start asking the unit's interpreter for sglang's version (about 0.1 s); None when there is no
        Python interpreter to ask."""
        if not exe or not os.path.basename(exe).startswith("python") or not (os.path.isfile(exe) and os.access(exe, os.X_OK)):
            return None
        return subprocess.Popen([exe, "-c", _FIND_SGLANG], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,  # pylint: disable=ansible-bad-function
                                stderr=subprocess.PIPE, universal_newlines=True, close_fds=True)

    @staticmethod
    def sglang_version(exe, asked):
        """(sglang's version or None, [problems]) for the unit's executable, from ask_version's process."""
        if not exe:
            return None, []
        if not (os.path.isfile(exe) and os.access(exe, os.X_OK)):
            return None, ["the unit's executable %s does not exist or is not executable" % exe]
        if asked is None:
            return None, []
        try:
            out, err = asked.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            asked.kill()
            out, err = asked.communicate()
        if asked.returncode != 0:
            return None, ["%s cannot find the sglang package (rc %d%s)" % (
                exe, asked.returncode, (": " + err.strip()[-300:]) if err.strip() else "")]
        return out.strip(), []
