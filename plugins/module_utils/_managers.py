# -*- coding: utf-8 -*-
# Copyright: inferops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What each module does with its parameters; the modules themselves only declare and document them."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import re
import time

from ansible_collections.inferops.sglang.plugins.module_utils import _nvidia, _patch, _procfs, _readiness, _signals, _systemd
from ansible_collections.inferops.sglang.plugins.module_utils._command import CommandError, timed
from ansible_collections.inferops.sglang.plugins.module_utils._redact import Redactor, argv_option
from ansible_collections.inferops.sglang.plugins.module_utils._selection import Selector, SelectionError

SELECTION_SPEC = dict(
    pid=dict(type="list", elements="raw"),
    pattern=dict(type="str"),
    user=dict(type="str"),
    exclude=dict(type="list", elements="str", default=[]),
    max_targets=dict(type="int", default=64),
    protect=dict(type="list", elements="str", default=[]),
    unprotect=dict(type="list", elements="str", default=[]),
)
REDACT_SPEC = dict(redact=dict(type="list", elements="str", default=[], no_log=False))
SELECTION_SPEC.update(REDACT_SPEC)
# A service's name without .service (an optional @instance), as sglang_switch and sglang_unit take it.
UNIT_NAME = r"^[A-Za-z0-9][A-Za-z0-9_.:-]*(@[A-Za-z0-9_.:-]+)?$"
STOP_SPEC = dict(
    signal=dict(type="str", default="TERM"),
    escalate=dict(type="str", default="KILL"),
    grace=dict(type="float", default=30.0),
)


class Base:
    def __init__(self, module):
        self.module = module
        self.params = module.params
        self.redact = Redactor(flags=self.params.get("redact") or ())
        self.t0 = time.monotonic()

    def fail(self, msg, **result):
        self.module.fail_json(msg=msg, **result)

    def selector(self, required=True):
        p = self.params
        try:
            return Selector(pid=p.get("pid"), pattern=p.get("pattern"), user=p.get("user"), exclude=p.get("exclude"),
                            max_targets=p.get("max_targets"), protect=p.get("protect"), unprotect=p.get("unprotect"),
                            required=required, redact=self.redact)
        except SelectionError as e:
            self.fail(str(e))

    def select(self, selector, **kw):
        try:
            return selector.select(**kw)
        except SelectionError as e:
            self.fail(str(e))

    def signals(self):
        try:
            return _signals.signum(self.params["signal"]), _signals.signum(self.params["escalate"])
        except ValueError as e:
            self.fail("%s: use a name such as TERM, INT, KILL or a number" % e)

    def describe(self, sel):
        return dict(
            refused=[dict(p.as_dict(self.redact), reason=why) for p, why in sel.refused],
            zombies=[p.as_dict(self.redact) for p in sel.zombies],
            missing=sel.missing,
        )

    def write_files(self, files, **result):
        """Write each _files.File that differs (nothing in check mode); a failed write fails the module."""
        for f in files:
            if f.differs and not self.module.check_mode:
                try:
                    f.write()
                except OSError as e:
                    self.fail("could not write %s: %s" % (f.path, e), **result)

    def elapsed(self):
        return round(time.monotonic() - self.t0, 3)

    def stop_targets(self, targets, roots, mode):
        """Signal targets; returns (per-target dicts, stop result)."""
        sig, esc = self.signals()
        if self.params["grace"] < 0:
            self.fail("grace must be >= 0 seconds")
        res = _signals.stop(targets, roots=roots, sig=sig, escalate=esc, grace=self.params["grace"], mode=mode)
        rows = []
        for p in targets:
            d = p.as_dict(self.redact)
            d.update(signals=res.sent.get(p.pid, []), ended_by=res.ended_by.get(p.pid, "still running"))
            rows.append(d)
        return rows, res

    def stop_failure(self, res, targets):
        by_pid = dict((p.pid, p) for p in targets)
        left = ["%d (%s%s)" % (pid, self.redact(by_pid[pid].cmdline)[:100],
                               ", stuck in uninterruptible sleep (D): waiting on the kernel, often a driver"
                               if pid in res.stuck else "") for pid in res.remaining]
        return "%d process(es) still alive after %s: %s" % (len(left), self.params["escalate"], "; ".join(left))


class ProcessKill(Base):
    def run(self):
        p = self.params
        sel = self.select(self.selector(), tree=p["tree"])
        self.signals()
        result = dict(changed=False, targets=[p_.as_dict(self.redact) for p_ in sel.targets], escalated=False,
                      remaining=[], stuck=[], **self.describe(sel))
        if self.module._diff:
            result["diff"] = dict(before="".join("%d %s\n" % (t.pid, self.redact(t.cmdline)) for t in sel.targets),
                                  after="")
        if not sel.targets:
            result.update(msg="no process to stop", elapsed=self.elapsed())
            self.module.exit_json(**result)
        if self.module.check_mode:
            result.update(changed=True, elapsed=self.elapsed(),
                          msg="would send %s to %d process(es)" % (p["signal"], len(sel.roots() if p["mode"] == "mixed" else sel.targets)))
            self.module.exit_json(**result)
        rows, res = self.stop_targets(sel.targets, sel.roots(), p["mode"])
        result.update(changed=True, targets=rows, escalated=res.escalated, remaining=res.remaining, stuck=res.stuck,
                      elapsed=self.elapsed(), timings=res.timings)
        if res.remaining:
            self.fail(self.stop_failure(res, sel.targets), **result)
        result["msg"] = "stopped %d process(es)%s" % (len(rows), ", escalated to %s" % p["escalate"] if res.escalated else "")
        self.module.exit_json(**result)


class ProcessCount(Base):
    def run(self):
        p = self.params
        selector = self.selector()
        expect, timeout = p["expect"], p["timeout"]
        if expect is not None and expect < 0:
            self.fail("expect must be >= 0")
        sel = self.select(selector)
        while expect is not None and len(sel.targets) != expect and not self.module.check_mode:
            if time.monotonic() - self.t0 >= timeout:
                result = self.result(sel)
                self.fail("expected %d matching process(es), found %d after %.1f s: %s" % (
                    expect, len(sel.targets), timeout,
                    "; ".join("%d %s" % (t.pid, self.redact(t.cmdline)[:100]) for t in sel.targets)), **result)
            time.sleep(0.05)
            sel = self.select(selector)
        self.module.exit_json(**self.result(sel))

    def result(self, sel):
        return dict(changed=False, count=len(sel.targets), pids=[t.pid for t in sel.targets],
                    processes=[t.as_dict(self.redact) for t in sel.targets], elapsed=self.elapsed(), **self.describe(sel))


class GpuRelease(Base):
    def run(self):
        p = self.params
        selector = self.selector(required=False)
        gpus = p["gpus"]
        if gpus is not None and any(g < 0 for g in gpus):
            self.fail("gpus are indices: 0, 1, ...")
        try:
            plan = _nvidia.plan(_procfs.snapshot(), selector, p["devices"], gpus)
        except SelectionError as e:
            self.fail(str(e))
        targets = plan.targets
        holders = plan.holders
        protected = [dict(h.as_dict(self.redact), reason=why) for h, why in plan.protected]
        other = [dict(h.as_dict(self.redact), reason=why) for h, why in plan.skipped]
        shared_only = [h.as_dict(self.redact) for h in plan.shared_only]
        smi = _nvidia.Smi(self.module.run_command)
        result = dict(changed=False, holders=[h.as_dict(self.redact) for h in holders],
                      targets=[h.as_dict(self.redact) for h in targets], protected=protected,
                      shared_only=shared_only, skipped=other, nvidia_smi=smi.available)
        if not smi.available:
            result["nvidia_smi_note"] = "nvidia-smi not found: memory is not read; the device-file scan alone decides"
        before = self.reading(smi, result, "before")
        if self.module._diff:
            result["diff"] = dict(before="".join("%d %s %s\n" % (h.proc.pid, ",".join(h.files), self.redact(h.proc.cmdline))
                                                 for h in targets), after="")
        if p["state"] == "query" or not targets:
            result.update(elapsed=self.elapsed(), msg="%d holder(s), %d target(s)" % (len(holders), len(targets)))
            self.module.exit_json(**result)
        if self.module.check_mode:
            result.update(changed=True, elapsed=self.elapsed(), msg="would release %d process(es)" % len(targets))
            self.module.exit_json(**result)
        rows, res = self.stop_targets([h.proc for h in targets], None, "all")
        result.update(changed=True, released=rows, escalated=res.escalated, remaining=res.remaining, stuck=res.stuck)
        if res.remaining:
            self.fail(self.stop_failure(res, [h.proc for h in targets]), **result)
        if before is not None:
            gone = set(h.proc.pid for h in targets)
            deadline = time.monotonic() + p["timeout"]
            after = self.reading(smi, result, "after")
            while after is not None and gone & set(a["pid"] for a in after["compute_apps"]):
                if time.monotonic() >= deadline:
                    self.fail("GPU memory of released processes is still in use after %.0f s: %s" % (
                        p["timeout"], after["compute_apps"]), **result)
                time.sleep(0.1)
                after = self.reading(smi, result, "after")
            result["memory_released_after"] = round(time.monotonic() - self.t0, 3)
        result.update(elapsed=self.elapsed(), msg="released %d process(es)" % len(rows))
        self.module.exit_json(**result)

    def reading(self, smi, result, key):
        if not smi.available:
            return None
        try:
            r = smi.reading()
        except Exception as e:  # pylint: disable=broad-except
            self.fail("reading nvidia-smi failed: %s" % e, **result)
        result[key] = r
        return r


class ModelWait(Base):
    def run(self):
        p = self.params
        if p["api_key"]:
            self.redact = Redactor(flags=p.get("redact") or (), values=[p["api_key"]])
        try:
            server = _readiness.Server(p["url"], api_key=p["api_key"])
        except ValueError as e:
            self.fail(str(e))
        if p["timeout"] <= 0:
            self.fail("timeout must be > 0 seconds")
        if self.module.check_mode:
            self.module.exit_json(changed=False, skipped_wait=True, msg="check mode: not waited for %s" % server.url)
        checks = []
        if p["pid"]:
            start = _procfs.starttime(p["pid"])
            if start is None:
                self.fail("pid %d is not running: the server cannot come up" % p["pid"], **self.logs())
            identity = (p["pid"], start)
            checks.append(lambda: None if _procfs.is_alive(identity) else "pid %d exited" % p["pid"])
        if p["unit"]:
            try:
                watch = _systemd.UnitWatch(self.module.run_command, p["unit"])
            except Exception as e:  # pylint: disable=broad-except
                self.fail("cannot watch unit %s: %s" % (p["unit"], e))
            checks.append(watch.problem)
        try:
            res = _readiness.wait(server, timeout=p["timeout"], ready=p["ready"], models=p["models"],
                                  generate=p["generate"], checks=checks)
        except _readiness.NotReady as e:
            out = dict(e.result)
            out.update(self.logs())
            self.fail(self.redact(str(e)), **out)
        res["url"] = server.url
        res["msg"] = "ready after %.1f s%s" % (res["ready_after"], " serving %s" % res["model"] if res.get("model") else "")
        self.module.exit_json(changed=False, **res)

    def logs(self):
        p = self.params
        if p["unit"]:
            lines = _systemd.journal(self.module.run_command, p["unit"], p["lines"])
        elif p["log_file"]:
            lines = _systemd.tail(p["log_file"], p["lines"])
        else:
            return {}
        return {"log_lines": [self.redact(line) for line in lines]}


_DIST_SCRIPT = (
    "import importlib.metadata as m, json\n"
    "d = m.distribution('sglang')\n"
    "rec = [f for f in (d.files or []) if f.name == 'RECORD' and f.parent.name.endswith('.dist-info')]\n"
    "print(json.dumps({'version': d.version, 'root': str(d.locate_file('')),"
    " 'dist_info': str(rec[0].locate().parent) if rec else None}))\n"
)


class SglangPatch(Base):
    """Applies (or reverts) a list of patches to the installed sglang package, and records the outcome."""

    STATE = {"applied": "applied", "already applied": "applied", "skipped": "skipped",
             "reverted": "original", "already original": "original"}

    def run(self):
        p = self.params
        rc, out, err = self.module.run_command([p["python"], "-I", "-c", _DIST_SCRIPT])
        if rc != 0:
            self.fail("cannot read the sglang package's metadata with %s (never importing it): %s"
                      % (p["python"], (err or out).strip()[-2000:]))
        dist = json.loads(out)
        version, root = dist["version"], dist["root"]
        previous = {}
        if p["record_path"] and os.path.exists(p["record_path"]):
            with open(p["record_path"]) as f:
                previous = dict((x["name"], x) for x in json.load(f).get("patches", []))
        results, events, explained, changed, diffs = [], [], {}, False, []
        for patch in p["patches"]:
            name = patch["name"]
            row = {"name": name, "versions": patch["versions"]}
            if version not in patch["versions"]:
                if patch.get("on_other_version", "fail") == "skip":
                    row["status"] = "skipped (sglang %s not in %s)" % (version, patch["versions"])
                    results.append(row)
                    continue
                self.fail("patch %s is for sglang %s; the installed version is %s. Check the patch against this "
                          "version and add it to its versions, or set on_other_version: skip"
                          % (name, ", ".join(patch["versions"]), version), version=version)
            try:
                plan = _patch.plan(root, patch["diff"])
            except _patch.PatchError as e:
                self.fail("patch %s: %s" % (name, e))
            backup = os.path.join(p["backup_dir"], name)
            if p["state"] == "reverted":
                row.update(self.revert(root, backup, name))
                row["backup"] = backup
                changed = changed or row["status"] == "reverted"
                results.append(row)
                continue
            if plan.state == "rejected":
                self.fail("patch %s neither applies to sglang %s nor is already in; nothing was changed. Rejected "
                          "hunks:\n%s" % (name, version, "\n".join("%s:\n%s" % (f, "\n".join(h)) for f, h in plan.rejected.items())),
                          rejected=plan.rejected, version=version)
            if plan.state == "apply":
                if previous.get(name, {}).get("state") == "applied":
                    events.append({"patch": name, "reason": "its changes were gone (sglang reinstalled?); re-applied"})
                if not self.module.check_mode:
                    _patch.write_atomic(root, plan.new, backup)
                changed = True
                diffs.append(patch["diff"])
                row["status"] = "applied"
                row["files"] = dict((rel, _patch.sha256_record(text.encode("utf-8"))) for rel, text in plan.new.items())
            else:
                row["status"] = "already applied"
                row["files"] = dict((rel, _patch.sha256_record(text.encode("utf-8"))) for rel, text in plan.old.items())
            row["backup"] = backup
            explained.update(row["files"])
            results.append(row)
        drift = []
        if dist["dist_info"] and p["state"] == "applied":
            drift = _patch.drift(root, _patch.record(dist["dist_info"]), explained)
            if self.module.check_mode:  # what would be written is not on disk yet
                drift = [d for d in drift if d["path"] not in explained]
        files_of = dict((r["name"], r.get("files", {})) for r in results)
        for e in events:  # a reinstall wiped a patch: drift too, file by file
            drift += [{"path": rel, "reason": "patch %s was gone (sglang reinstalled?); re-applied" % e["patch"]}
                      for rel in sorted(files_of.get(e["patch"], {}))]
        # The record holds the state (stable from run to run) and the history of events, not this run's news.
        prev_rec = self.load(p["record_path"])
        stamped = [dict(e, time=time.time()) for e in events]
        rec = {"package": "sglang", "version": version, "root": root, "drift": drift,
               "history": (prev_rec.get("history") or []) + stamped,
               "patches": [{"name": r["name"], "versions": r["versions"], "files": r.get("files", {}),
                            "state": self.STATE.get(r["status"].split(" (")[0], r["status"])} for r in results],
               "time": time.time()}
        if p["record_path"] and dict(rec, time=None) != dict(prev_rec, time=None):
            changed = True  # the record is part of what the module manages
            if not self.module.check_mode:
                os.makedirs(os.path.dirname(p["record_path"]), exist_ok=True)
                with open(p["record_path"] + ".tmp", "w") as f:
                    json.dump(rec, f, indent=2, sort_keys=True)
                os.chmod(p["record_path"] + ".tmp", 0o644)
                os.replace(p["record_path"] + ".tmp", p["record_path"])
        result = dict(changed=changed, version=version, root=root, patches=results, drift=drift, events=events,
                      record_path=p["record_path"])
        if self.module._diff and diffs:
            result["diff"] = {"prepared": "\n".join(diffs)}
        self.module.exit_json(**result)

    @staticmethod
    def load(path):
        if not path or not os.path.exists(path):
            return {}
        with open(path) as f:
            return json.load(f)

    def revert(self, root, backup, name):
        """Put back the originals kept in backup (byte for byte)."""
        if not os.path.isdir(backup):
            return {"status": "nothing to revert (no backup of %s)" % name}
        contents, files = {}, {}
        for base, dummy, names in os.walk(backup):
            for n in names:
                rel = os.path.relpath(os.path.join(base, n), backup)
                with open(os.path.join(base, n), "rb") as f:
                    original = f.read()
                with open(os.path.join(root, rel), "rb") as f:
                    current = f.read()
                files[rel] = _patch.sha256_record(original)
                if current != original:
                    contents[rel] = original.decode("utf-8")
        if contents and not self.module.check_mode:
            _patch.write_atomic(root, contents)
        return {"status": "reverted" if contents else "already original", "files": files}


class SglangDiscover(Base):
    """Finds the server on a port, its family, a supervising wrapper, and captures what it runs."""

    def run(self):
        from ansible_collections.inferops.sglang.plugins.module_utils import _discover

        p = self.params
        if not 0 < p["port"] < 65536:
            self.fail("port must be 1-65535, not %d" % p["port"])
        procs = _procfs.snapshot()
        pids = _discover.listeners(p["port"], procs)
        service = p["unit"] + ".service" if p["unit"] else None
        disabled = _discover.disabled_launchers(service) if service else []
        if not pids:
            self.module.exit_json(changed=False, found=False, port=p["port"], adhoc=False, family=[],
                                  launchers=_discover.launchers(p["port"]), disabled_launchers=disabled,
                                  stored=_stored(p["capture_path"]), msg="nothing listens on port %d" % p["port"])
        server = _discover.main_process(pids[0], procs)
        fam = _discover.family_of(server, procs)
        cap = _discover.capture(server.pid)
        wrapper = _discover.wrapper(server, procs)
        if wrapper and wrapper["kind"] == "shell loop":
            cap["wrapper"] = _discover.capture(wrapper["pid"])  # a rollback starts the loop again, not the server
        secrets = self.redact.secrets_of(cap["argv"], cap["environment"])
        if cap.get("wrapper"):
            secrets += self.redact.secrets_of(cap["wrapper"]["argv"], cap["wrapper"]["environment"])
        self.redact = Redactor(flags=p.get("redact") or (), values=secrets)
        public = dict(cap, argv=self.redact.argv(cap["argv"]), environment=self.redact.env(cap["environment"]))
        if cap.get("wrapper"):
            public["wrapper"] = dict(cap["wrapper"], argv=self.redact.argv(cap["wrapper"]["argv"]),
                                     environment=self.redact.env(cap["wrapper"]["environment"]))
        owner = _procfs.unit_of(server.pid)
        unit_state = None
        if owner and owner == service:
            try:
                unit_state = _systemd.show(self.module.run_command, service, ["ActiveState"]).get("ActiveState")
            except (RuntimeError, CommandError):
                pass
        result = dict(changed=False, found=True, port=p["port"], server=dict(server.as_dict(self.redact), unit=owner),
                      unit_state=unit_state,
                      family=[procs[pid].as_dict(self.redact) for pid in fam if pid in procs],
                      wrapper=wrapper, capture=public, adhoc=owner != service, disabled_launchers=disabled,
                      sglang=_discover.is_sglang(server),
                      launchers=_discover.launchers(p["port"], [wrapper.get("script")] if wrapper else []))
        if result["sglang"]:
            result["model"] = served_model(p["port"], cap["argv"])
        if wrapper:
            wrapper["cmdline"] = self.redact(wrapper["cmdline"])
        for row in result["launchers"]:
            row["line"] = self.redact(row["line"])
        if p["capture_path"] and owner != service and result["sglang"]:
            from ansible_collections.inferops.sglang.plugins.module_utils import _files

            capture = _files.File(p["capture_path"], json.dumps(cap, indent=2, sort_keys=True), 0o600, dir_mode=0o700)
            result["changed"] = capture.differs
            self.write_files([capture], **result)
            result["capture_path"] = p["capture_path"]
            result["stored"] = cap
        else:
            result["stored"] = _stored(p["capture_path"])
        self.module.exit_json(**result)


def _stored(path):
    """What the capture file holds ({} when there is none)."""
    from ansible_collections.inferops.sglang.plugins.module_utils._switch import read_json

    return (read_json(path) or {}) if path else None


def served_model(port, argv, timeout=5.0):
    """The first model /v1/models names on the server listening on port (asked with its own --api-key), or None."""
    from ansible_collections.inferops.sglang.plugins.module_utils import _discover

    url = _discover.local_url(port)
    if not url:
        return None
    server = _readiness.Server(url, api_key=argv_option(argv, "--api-key"))
    names = _readiness.model_names(server.request("/v1/models", timeout=timeout))
    return names[0] if names else None


_FIND_SGLANG = ("import importlib.util, importlib.metadata as m, sys\n"
                "if not importlib.util.find_spec('sglang'): sys.exit(3)\n"
                "print(m.version('sglang'))\n")


class SglangSwitch(Base):
    """Preflight (always; alone in check mode), then the detached switch, waited for."""

    def run(self):
        from ansible_collections.inferops.sglang.plugins.module_utils import _switch

        p = self.params
        port, name = p["port"], p["unit"]
        if not 0 < port < 65536:
            self.fail("port must be 1-65535, not %d" % port)
        if not re.match(UNIT_NAME, name) or name.endswith(".service"):
            self.fail("unit %r: give the service's name without .service, of letters, digits and _ . : -" % name)
        if p["drain"] < 0:
            self.fail("drain must be >= 0 seconds")
        unit = name + ".service"
        state_dir = os.path.join(p["state_dir"], str(port))
        timeout = p["timeout"] if p["timeout"] is not None else p["drain"] + 120
        run = self.module.run_command
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
        busy = _switch.lock_busy(state_dir)
        active = state.get("ActiveState")
        if busy:
            action = "join"
        elif back:
            action = "none" if insp["owner"] == "adhoc" else "rollback"
        elif insp["owner"] == "adhoc":
            action = "switch"
        elif insp["owner"] == "unit":
            action = "restart" if p["restart"] else "none"
        elif active in ("active", "activating", "reloading") and not p["restart"]:
            action = "none"  # loading: nothing listens yet
        else:
            action = "start"
        version = None
        if action not in ("none", "join"):  # the unit's interpreter is asked only when it is about to run
            version, why = self.sglang_version(p["executable"])
            problems += why
        result = dict(changed=action != "none", action=action, port=port, unit=unit, preflight=insp, sglang_version=version,
                      unit_state=active, problems=problems, preflight_seconds=round(time.monotonic() - t, 3))
        if problems and action not in ("none", "join"):
            self.fail("preflight failed, nothing was stopped: " + " | ".join(problems), **result)
        if self.module.check_mode or action == "none":
            result["msg"] = {"none": "%s: nothing to switch" % ("the captured command serves port %d" % port if back
                                                                else "%s serves port %d" % (unit, port)),
                             "join": "a switch of port %d is in progress" % port}.get(
                action, "would %s: %d process(es) of the family, GPUs %s, then start %s" % (
                    action, len(insp["family"]), insp["gpus"], unit))
            self.module.exit_json(**result)
        run_id = None
        if action != "join":
            run_id = "%d-%d" % (int(time.time()), os.getpid())
            plan = dict(id=run_id, action=action, target=p["target"], port=port, unit=unit, unit_name=name,
                        state_dir=state_dir, drain=p["drain"], release_strays=p["release_strays"],
                        devices=list(p["devices"]))
            try:
                result["launched"] = _switch.launch(plan, run)[:4]
            except Exception as e:  # pylint: disable=broad-except
                self.fail("could not start the switch, nothing was stopped: %s" % e, **result)
        try:
            outcome = _switch.wait(state_dir, run_id, timeout)
        except TimeoutError as e:
            self.fail(str(e), **result)
        result.update(outcome=outcome, steps=outcome.get("steps", []), downtime=outcome.get("downtime"),
                      started_at=outcome.get("started_at"), pid_started=outcome.get("pid_started"), elapsed=self.elapsed())
        if outcome.get("error"):
            self.fail("the switch stopped at %s: %s" % (
                (outcome.get("steps") or [{}])[-1].get("step", "its start"), outcome["error"]), **result)
        result["msg"] = "%s: %s" % (action, ", ".join("%s %.2f s" % (s["step"], s["seconds"]) for s in result["steps"]))
        self.module.exit_json(**result)

    def sglang_version(self, exe):
        """(sglang's version or None, [problems]) for the unit's executable."""
        if not exe:
            return None, []
        if not (os.path.isfile(exe) and os.access(exe, os.X_OK)):
            return None, ["the unit's executable %s does not exist or is not executable" % exe]
        if not os.path.basename(exe).startswith("python"):
            return None, []
        rc, out, err = self.module.run_command([exe, "-c", _FIND_SGLANG])
        if rc != 0:
            return None, ["%s cannot find the sglang package (rc %d%s)" % (
                exe, rc, (": " + err.strip()[-300:]) if err.strip() else "")]
        return out.strip(), []


class SglangUnit(Base):
    """The unit, its environment file and its readiness gate: verified, written when they differ, enabled,
    started or restarted when asked, in one call."""

    def run(self):
        from ansible_collections.inferops.sglang.plugins.module_utils import _files, _unit

        p = self.params
        name = p["name"]
        if not re.match(UNIT_NAME, name) or name.endswith(".service"):
            self.fail("name %r: give the service's name without .service, of letters, digits and _ . : -" % name)
        for key in ("environment_path", "gate_path"):
            if p[key] and not os.path.isabs(p[key]):
                self.fail("%s must be an absolute path, not %r" % (key, p[key]))
        service = name + ".service"
        run = self.module.run_command
        try:
            states = _systemd.show_many(run, [service] + p["wants"], ("LoadState", "ActiveState", "UnitFileState"))
        except (RuntimeError, CommandError) as e:
            self.fail(str(e))
        present = [u for u, s in zip(p["wants"], states[1:]) if s.get("LoadState") == "loaded"]
        unit = _files.File(os.path.join(p["unit_dir"], service), _unit.with_wants(p["unit"], present), 0o644, 0, 0)
        files = [unit]
        env = None
        if p["environment_path"]:
            env = _files.File(p["environment_path"], p["environment"], 0o600, 0, 0, dir_mode=0o700)
            files.append(env)
        if p["gate_path"]:
            files.append(_files.File(p["gate_path"], p["gate"], 0o644, 0, 0))
        if unit.content_differs:  # in check mode too; a unit that does not change was verified before
            try:
                why = _unit.verify(run, unit.content, service)
            except CommandError as e:
                why = str(e)
            if why:
                self.fail("systemd-analyze verify rejected the unit %s, so it was not installed: %s" % (service, why))
        now = states[0]
        active = now.get("ActiveState") in ("active", "activating", "reloading")
        enabled = now.get("UnitFileState") == "enabled"
        served_changed = unit.content_differs or (env is not None and env.content_differs)
        result = dict(changed=False, unit=service, unit_path=unit.path, checksum=_files.sha1(unit.content),
                      environment_file=p["environment_path"], wants_present=present, active_state=now.get("ActiveState"),
                      changed_files=[f.path for f in files if f.differs], reloaded=False,
                      enabled_changed=False, restarted=False, started=False,
                      restart_needed=served_changed and active and not p["restart_on_change"])
        if self.module._diff:  # pylint: disable=protected-access
            result["diff"] = [f.diff(_masked if f is env else None) for f in files if f.content_differs]
        self.write_files(files, **result)
        steps = []
        if unit.content_differs:
            steps.append(("reloaded", ["systemctl", "daemon-reload"]))
        if p["enabled"] != enabled:
            steps.append(("enabled_changed", ["systemctl", "enable" if p["enabled"] else "disable", service]))
        if p["restart_on_change"] and active and served_changed:
            steps.append(("restarted", ["systemctl", "restart", service]))
        elif p["state"] == "started" and not active:
            steps.append(("started", ["systemctl", "start", service]))
        result["changed"] = bool(result["changed_files"] or steps)
        for key, argv in steps:
            result[key] = True
            if self.module.check_mode:
                continue
            # a start blocks until the readiness gate says ready: systemd bounds it with TimeoutStartSec
            rc, out, err = run(argv) if key in ("restarted", "started") else timed(run, argv, 120)
            if rc != 0:
                self.fail("%s failed (rc %d): %s" % (" ".join(argv), rc, (err or out).strip()[-2000:]), **result)
        self.module.exit_json(**result)


def _masked(text):
    """An environment file's text with the values hidden (it holds secrets)."""
    return "".join(line.split("=", 1)[0] + "=********\n" if "=" in line and not line.startswith("#") else line + "\n"
                   for line in text.splitlines())


class CutoverRecord(Base):
    """The record of a cutover or a rollback in the port's state folder: last.json (and last.md), plus one
    file per run named after its time."""

    def run(self):
        from ansible_collections.inferops.sglang.plugins.module_utils import _files

        p = self.params
        if not os.path.isabs(p["dir"]):
            self.fail("dir must be an absolute path, not %r" % p["dir"])
        try:
            began = float(p["record"].get("time"))
        except (TypeError, ValueError):
            self.fail("the record needs its time (seconds since the epoch), not %r" % (p["record"].get("time"),))
        data = json.dumps(p["record"], indent=4, sort_keys=True) + "\n"
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(began))
        texts = [("last.json", data), ("%s-%s.json" % (p["kind"], stamp), data)]
        if p["report"]:
            texts.append(("last.md", p["report"]))
        files = [_files.File(os.path.join(p["dir"], name), text, 0o640, 0, 0, dir_mode=0o700) for name, text in texts]
        written = [f.path for f in files if f.differs]
        self.write_files(files)
        self.module.exit_json(changed=bool(written), files=[f.path for f in files], written=written)
