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
    _discover, _files, _procfs, _readiness, _record, _selinux, _sglang_args, _switch, _systemd, _unit)
from ansible_collections.inferops.sglang.plugins.module_utils._base import Base
from ansible_collections.inferops.sglang.plugins.module_utils._redact import Redactor


_FIND_SGLANG = ("import importlib.util, importlib.metadata as m, sys\n"
                "if not importlib.util.find_spec('sglang'): sys.exit(3)\n"
                "print(m.version('sglang'))\n")


class SglangSwitch(Base):
    """Preflight (always; alone in check mode), then the detached switch, waited for."""

    def run(self):
        p = self.params
        since = time.time()  # a switch of the port that finished after this is this run's too
        port, name = self.port_and_unit()
        unit = name + ".service"
        state_dir = os.path.join(p["state_dir"], str(port))
        timeout = p["timeout"] if p["timeout"] is not None else p["drain"] + 120
        run = self.module.run_command
        command = p["command"] or ([p["executable"]] if p["executable"] else [])
        python, server_args, entry = _sglang_args.interpreter(command) if p["target"] == "unit" else (None, None, None)
        asked = self.ask_version(python)  # answers while we look
        parsing = _sglang_args.start(python, server_args, entry) if python and server_args is not None else None
        said = []  # the parser's answer, once collected
        installed, restart = None, p["restart"]
        if p["install"] and p["target"] == "unit":  # verified before anything is stopped; nothing written in check mode
            if parsing and not self.module.check_mode and _sglang_args.command_changes(
                    p["install"]["unit"], os.path.join(p["install"]["unit_dir"], unit)):
                said.append(self.parsed(python, parsing))  # a command SGLang refuses is not even installed
                if said[0]:
                    self.fail("preflight failed, nothing was touched: " + said[0], action="none", port=port, unit=unit,
                              problems=said)
            installed = _unit.install(self, dict(p["install"], name=name), enabled=True)
            restart = restart or installed["restart_needed"]  # what the running unit runs changed
        t = time.monotonic()
        insp = _switch.inspect(port, name, tuple(p["devices"]), run=run, flags=p["redact"])
        state = _systemd.show(run, unit)
        problems = list(insp["problems"])
        if insp["strays"] and not p["release_strays"]:
            problems.append("processes outside the server's family hold its GPUs %s: %s. Stop them, or allow the "
                            "switch to release them" % (insp["gpus"], "; ".join(
                                "%d %s (%s)" % (s["pid"], s["cmdline"][:120], ", ".join(s["devices"]))
                                for s in insp["strays"])))
        back = p["target"] == "capture"
        if back and not os.path.exists(os.path.join(state_dir, "capture.json")):
            problems.append("there is no capture in %s: nothing to go back to" % state_dir)
        if state.get("LoadState") != "loaded" and not self.module.check_mode and not back:
            problems.append("%s is not installed (LoadState %s)" % (unit, state.get("LoadState")))
        active = state.get("ActiveState")
        joining = _switch.current(state_dir)  # a switch of the port in progress: this run reports it
        if joining:
            action = "join"
        elif back:
            action = "none" if insp["owner"] == "adhoc" else "rollback"
        elif insp["owner"] == "adhoc":
            action = "switch"
        elif insp["owner"] == "unit":
            action = "restart" if restart else "none"
        elif active in ("active", "activating", "reloading") and not restart:
            action = "none"  # loading: nothing listens yet
        else:
            action = "start"
        version = None
        if action not in ("none", "join"):  # the answers count only when the unit is about to run
            version, why = self.sglang_version(p["executable"] or python, asked)
            problems += why
            if parsing and not why:  # the installed SGLang parses them: a bad flag stops here
                said = said or [self.parsed(python, parsing)]
                problems += [x for x in said if x]
        else:
            for proc in (asked, parsing):
                if proc and not isinstance(proc, str) and proc.poll() is None:
                    proc.kill()
                    proc.communicate()
        selinux = None
        if p["target"] == "unit" and command and action not in ("none", "join"):
            selinux = self.selinux(command[0] if command else None, problems)
        result = dict(changed=action != "none", action=action, port=port, unit=unit, preflight=insp, sglang_version=version,
                      unit_state=active, problems=problems, preflight_seconds=round(time.monotonic() - t, 3),
                      selinux=selinux)
        if installed:
            if "diff" in installed:
                result["diff"] = installed.pop("diff")
            result.update(installed=installed, changed=result["changed"] or installed["changed"])
        if problems and action not in ("none", "join"):
            self.fail("preflight failed, nothing was stopped: " + " | ".join(problems), **result)
        if self.module.check_mode or action == "none":
            result["msg"] = {"none": "%s: nothing to switch" % ("the captured command serves port %d" % port if back
                                                                else "%s serves port %d" % (unit, port)),
                             "join": "a switch of port %d is in progress" % port}.get(
                action, "would %s: %d process(es) of the family, GPUs %s, then start %s" % (
                    action, len(insp["family"]), insp["gpus"], unit))
            if action == "none" and not self.module.check_mode:
                self.late_record(result, state_dir, unit)
            self.module.exit_json(**result)
        run_id = joining
        if action != "join":
            plan = dict(id="%d-%d" % (int(since), os.getpid()), action=action, target=p["target"], port=port, unit=unit,
                        unit_name=name, state_dir=state_dir, drain=p["drain"], release_strays=p["release_strays"],
                        devices=list(p["devices"]), record=self.record_plan(insp, version, installed))
            try:
                run_id, argv = _switch.launch(plan, since, run)
            except Exception as e:  # pylint: disable=broad-except
                self.fail("could not start the switch, nothing was stopped: %s" % e, **result)
            if argv:
                result["launched"] = argv[:4]
            else:
                action = result["action"] = "join"
        result["run_id"] = run_id
        try:
            outcome = _switch.wait(state_dir, run_id, timeout)
        except TimeoutError as e:
            self.fail(str(e), **result)
        result.update(run_id=outcome.get("id"), outcome=outcome, steps=outcome.get("steps", []),
                      downtime=outcome.get("downtime"), started_at=outcome.get("started_at"),
                      pid_started=outcome.get("pid_started"), elapsed=self.elapsed())
        if action == "join":
            result["msg"] = "joined the switch %s of port %d in progress" % (outcome.get("id"), port)
        if outcome.get("error"):
            self.fail("the switch stopped at %s: %s" % (
                (outcome.get("steps") or [{}])[-1].get("step", "its start"), outcome["error"]), **result)
        result["msg"] = "%s%s: %s" % (action, " of " + str(outcome.get("id")) if action == "join" else "", ", ".join(
            "%s %.2f s" % (s["step"], s["seconds"]) for s in result["steps"]) or outcome.get("note", ""))
        if p["wait"] and outcome.get("started_at"):
            self.serve(result, outcome, unit, state_dir, back)
        plan = _files.read_json(_switch.plan_path(state_dir, outcome["id"])) or {}
        if p["record"] and plan.get("record") and outcome.get("started_at"):
            self.keep_record(result, outcome, plan["record"], plan.get("target") == "capture", state_dir)
        self.module.exit_json(**result)

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

    def record_plan(self, insp, version, installed):
        """What the record takes from this run, kept with the plan: whichever run finds the switch finished
        first keeps the record from it (this one, one that joined it, or a rerun after an interruption)."""
        given = self.params["record"]
        if not given:
            return None
        rec = dict(dir=given["dir"], data=given["data"], family=[x["pid"] for x in insp["family"]],
                   gpus=insp.get("gpus"), sglang_version=version, installed=None)
        if installed:
            rec["installed"] = dict((k, installed[k]) for k in ("seconds", "unit_path", "checksum", "environment_names"))
        return rec

    def late_record(self, result, state_dir, unit):
        """A finished switch whose record was never kept (its controller was interrupted): keep it now, with the
        switch's own timings and, for the unit, the load systemd saw (start to active: the gate passed)."""
        outcome = _files.read_json(os.path.join(state_dir, _switch.OUTCOME)) or {}
        plan = _files.read_json(_switch.plan_path(state_dir, outcome.get("id"))) or {}
        if not (self.params["record"] and plan.get("record") and outcome.get("finished") and not outcome.get("error")
                and outcome.get("started_at") and "recorded" not in outcome):
            return
        back = plan.get("target") == "capture"
        result.update(run_id=outcome["id"], steps=outcome.get("steps", []), downtime=outcome.get("downtime"),
                      started_at=outcome.get("started_at"), pid_started=outcome.get("pid_started"),
                      elapsed=outcome.get("seconds"))
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
        """The record: what the switch's run gave (given: record_plan's), completed with what the switch and the
        wait found (load: the load time where no wait of this run saw it); written where given["dir"] says, by one
        run only (nothing in check mode)."""
        rec = dict(given["data"], time=outcome.get("began"))
        if back:
            rec.update(action="rollback", rollback_steps=result.get("steps"), rollback_downtime_sec=result.get("downtime"),
                       pid_started=result.get("pid_started"), ready_after_sec=result.get("ready_after"))
        else:
            old = dict(rec.get("old") or {}, family=given["family"])
            downtime, load = result.get("downtime"), result.get("ready_after", load)
            stages = dict(rec.get("stages_sec") or {}, switch=result.get("elapsed"))
            installed = given.get("installed")
            if installed and stages["switch"] is not None:
                stages["unit"] = installed["seconds"]
                stages["switch"] = round(stages["switch"] - installed["seconds"], 3)
            if installed:
                rec.update(unit_path=installed["unit_path"], unit_checksum=installed["checksum"],
                           environment_names=installed["environment_names"])
            if result.get("wait_seconds") is not None:
                stages["verify"] = result["wait_seconds"]
            rec.update(action=outcome.get("action"), old=old, steps=result.get("steps"), downtime_switch_sec=downtime,
                       load_sec=load, downtime_until_ready_sec=round((downtime or 0.0) + (load or 0.0), 3),
                       model=result.get("model"), generated=bool(result.get("generated")),
                       sglang_version=given.get("sglang_version"), gpus=given.get("gpus"), stages_sec=stages)
        try:
            files = _record.files(given["dir"], "rollback" if back else "cutover", rec) if given["dir"] else []
            result["report"] = _record.report(rec)
        except ValueError as e:
            self.failed(str(e), result)
        result["record"] = rec
        result["record_written"] = []
        claim = _switch.RecordClaim(state_dir, outcome.get("id"))
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
