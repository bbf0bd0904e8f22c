# -*- coding: utf-8 -*-
# Copyright: inferops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""sglang_adopt: the server on a port adopted by systemd in place, without a restart. Named phases: look, decide,
move (the family into the scope, in one call), neutralise (a wrapper loop), watch (the takeover)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import sys
import time

from ansible_collections.inferops.sglang.plugins.module_utils import _state_dir
from ansible_collections.inferops.sglang.plugins.module_utils._base import Base
from ansible_collections.inferops.sglang.plugins.module_utils._host import (
    procfs as _procfs, scope as _scope, signals as _signals, systemd as _systemd)
from ansible_collections.inferops.sglang.plugins.module_utils._host.command import CommandError, timed
from ansible_collections.inferops.sglang.plugins.module_utils._server import (
    capture as _capture, family as _family, port_units as _port_units)
from ansible_collections.inferops.sglang.plugins.module_utils._switch import (
    lock as _switch_lock, outcome as _switch_outcome, preflight as _preflight)
from ansible_collections.inferops.sglang.plugins.module_utils._switch.states import AdoptActions, Owners

SETTLE = 5.0  # how long systemd may take to start the scope once asked


def decide(insp, where, watcher_active, scope):
    """What adopt does, from what is on the port (_preflight.inspect), where each family pid is ({pid: scope or None})
    and whether the watcher runs: (action, why). action (states.AdoptActions): none, adopt (move, neutralise, watch),
    attach (family pids born since the move, outside the scope), watch (the watcher only), or fail."""
    if insp["owner"] is None:
        return AdoptActions.FAIL, "nothing listens on port %d: there is no server to adopt" % insp["port"]
    if insp["owner"] == Owners.UNIT:
        return AdoptActions.NONE, "%s serves port %d: nothing to adopt" % (insp["unit"], insp["port"])
    if insp["problems"]:
        return AdoptActions.FAIL, "nothing was touched: " + "; ".join(insp["problems"])
    if where.get(insp["server"]["pid"]) != scope:
        loop = (insp.get("wrapper") or {}).get("kind") == "shell loop"
        return AdoptActions.ADOPT, "would move %d process(es) into %s, %swatch for the takeover" % (
            len(insp["family"]), scope, "stop the wrapper loop %d, " % insp["wrapper"]["pid"] if loop else "")
    outside = sorted(pid for pid, s in where.items() if s != scope)
    if outside:
        return AdoptActions.ATTACH, "would move pids %s, born since the adoption, into %s" % (outside, scope)
    if not watcher_active:
        return AdoptActions.WATCH, "would start the watcher of %s" % scope
    return AdoptActions.NONE, "the server on port %d is adopted (%s): nothing to do" % (insp["port"], scope)


class SglangAdopt(Base):

    def run(self):
        p = self.params
        port, name = self.port_and_unit()
        self.service = name + ".service"
        self.scope, self.watcher = _scope.names(name)
        self.state_dir = _state_dir.folder(p["state_dir"], port)
        self.steps = []
        try:
            capture = _capture.capture_file(self.state_dir, p["capture"]) if p["capture"] else None
        except ValueError as e:
            self.fail(str(e))
        insp, where, watcher_active = self.look(port, name)
        action, why = decide(insp, where, watcher_active, self.scope)
        # the other units that could serve the port, which would fight the service at its next start
        units = [u for u in _port_units.decide(_port_units.find(
            port, self.module.run_command, self.service, (insp["server"] or {}).get("pid"), redact=self.redact),
            p["existing_units"]) if u["action"] != "rewrite"]  # sglang_unit put the service of that name in place
        refused = [u["summary"] for u in units if u["action"] == "refuse"]
        if refused and action != AdoptActions.FAIL:
            action, why = AdoptActions.FAIL, "nothing was touched: " + _port_units.refusal(port, refused)
        acting = [u for u in units if u["action"] == "replace"]
        result = dict(changed=action not in (AdoptActions.NONE, AdoptActions.FAIL) or bool(acting), action=action, port=port,
                      unit=self.service, began=time.time(), scope=self.scope, watcher=self.watcher, preflight=insp,
                      steps=self.steps, units=units)
        if action == AdoptActions.FAIL:
            self.failed(why, result, changed=False)
        if self.module.check_mode or action == AdoptActions.NONE:
            self.module.exit_json(msg=why, **dict(result, **self.adopted(insp)))
        if _switch_outcome.current(self.state_dir):
            self.fail("a switch of port %d is in progress: nothing was touched" % port, **result)
        try:
            result["units_taken"] = _port_units.take_over(acting, self.state_dir, self.module.run_command)
        except (RuntimeError, OSError, CommandError) as e:
            self.fail(str(e), **result)
        if action == AdoptActions.ADOPT and capture:  # what a rollback starts again, kept before the family is moved
            self.write_files([capture], **result)
        try:
            if action == AdoptActions.ADOPT:
                self.phase("move", lambda: self.move(insp), result)
                self.phase("neutralise", lambda: self.neutralise(insp), result)
            elif action == AdoptActions.ATTACH:
                self.phase("move", lambda: self.attach(insp), result)
            if action == AdoptActions.ADOPT or not watcher_active:
                self.phase("watch", lambda: self.watch(insp), result)
        except _scope.ScopeError as e:
            self.fail(str(e), **result)
        result.update(self.adopted(insp), elapsed=self.elapsed(),
                      msg="%s: %s" % (action, ", ".join("%s %.2f s" % (s["step"], s["seconds"]) for s in self.steps)))
        self.module.exit_json(**result)

    def phase(self, name, fn, result):
        t = time.monotonic()
        try:
            detail = fn() or {}
        except (CommandError, OSError) as e:
            raise _scope.ScopeError("%s: %s" % (name, e))
        finally:
            result["steps"] = self.steps
        self.steps.append(dict(detail, step=name, seconds=round(time.monotonic() - t, 3)))

    # --- look ---------------------------------------------------------------------------------------------

    def look(self, port, name):
        """What serves the port and its family (orphans included), where each member is, whether the watcher runs."""
        run = self.module.run_command
        insp = _preflight.inspect(port, name, tuple(self.params["devices"]), run=run, flags=self.params["redact"])
        insp["family"] = [f for f in insp["family"] if f["state"] not in ("Z", "X")]  # a zombie has no cgroup to move
        where = dict((f["pid"], _scope.scope_of(f["pid"])) for f in insp["family"])
        try:
            state = _systemd.show(run, self.watcher, ("ActiveState",)).get("ActiveState")
        except (RuntimeError, CommandError) as e:
            self.fail("cannot ask systemd about %s: %s" % (self.watcher, e))
        return insp, where, state in ("active", "activating")

    def adopted(self, insp):
        """What the record and the summary say of the adopted server."""
        server = insp.get("server") or {}
        pid = server.get("pid")
        if not pid:
            return {}
        out = dict(pid=pid, family_pids=[f["pid"] for f in insp["family"]], in_scope=_scope.scope_of(pid) == self.scope,
                   log=_procfs.open_files(pid).get(1))
        try:
            out["since"] = round(_scope.since(server["starttime"]), 1)
        except (OSError, StopIteration, ValueError):
            out["since"] = None
        return out

    # --- move ---------------------------------------------------------------------------------------------

    def move(self, insp):
        """The whole family into the scope in one call; then kin born since the look, attached. Nothing is stopped:
        a failure leaves each process running where it is, and says where."""
        pids = [f["pid"] for f in insp["family"] if _procfs.is_alive((f["pid"], f["starttime"]))]
        argv = _scope.start_argv(self.scope, pids, self.service, self.params["drain"],
                                 "SGLang server on port %d, adopted in place (%s takes over)" % (insp["port"], self.service))
        rc, out, err = timed(self.module.run_command, argv, 30)
        if rc != 0:
            raise _scope.ScopeError("systemd did not create %s (rc %d): %s. Nothing was moved: the family (pids %s) "
                                    "keeps running where it was." % (self.scope, rc, (err or out).strip()[-500:], pids))
        job = _scope.parse_reply(out)
        missing = self.settle(pids)
        if missing:
            raise _scope.ScopeError(self.where_now(pids, "the move into %s was partial" % self.scope))
        return dict(self.attach(insp), job=job, moved=pids)

    def settle(self, pids):
        """The pids (still alive) not yet in the scope after SETTLE seconds."""
        deadline = time.monotonic() + SETTLE
        while True:
            missing = [p for p in pids if _procfs.state(p) not in (None, "Z", "X") and _scope.scope_of(p) != self.scope]
            if not missing or time.monotonic() >= deadline:
                return missing
            time.sleep(0.05)

    def attach(self, insp):
        """Kin of the server born since the look (or since the adoption), attached to the scope."""
        procs = _procfs.snapshot()
        server = procs.get(insp["server"]["pid"])
        if server is None or server.starttime != insp["server"]["starttime"]:
            raise _scope.ScopeError("the server (pid %d) ended during the adoption" % insp["server"]["pid"])
        late = [pid for pid in _family.family_of(server, procs)
                if pid in procs and not procs[pid].is_zombie and _scope.scope_of(pid) != self.scope]
        if late:
            rc, out, err = timed(self.module.run_command, _scope.attach_argv(self.scope, late), 30)
            if rc != 0 or self.settle(late):
                raise _scope.ScopeError(self.where_now(late, "pids %s could not join %s (rc %d: %s)" % (
                    late, self.scope, rc, (err or out).strip()[-300:])))
        return {"attached": late}

    def where_now(self, pids, what):
        places = ", ".join("%d in %s" % (p, _scope.scope_of(p) or _procfs.unit_of(p) or "its old cgroup") for p in pids)
        return ("%s: %s. Nothing was stopped: every process keeps running where it is; the watcher was not started. "
                "Run the adoption again, or stop %s to end what it holds." % (what, places, self.scope))

    # --- neutralise ---------------------------------------------------------------------------------------

    def neutralise(self, insp):
        """A shell loop that would start a second copy: SIGKILL to the loop alone, the server untouched."""
        return _signals.stop_loop(insp["wrapper"])

    # --- watch --------------------------------------------------------------------------------------------

    def watch(self, insp):
        """The watcher: drains the server when the scope stops; starts the service when the server ends on its own."""
        run = self.module.run_command
        _systemd.systemctl(run, _systemd.Verbs.RESET_FAILED, self.watcher, 15)
        identity = (insp["server"]["pid"], insp["server"]["starttime"])
        argv = _scope.watch_argv(sys.executable, self.scope, self.watcher, self.service, identity,
                                 self.params["drain"], _state_dir.lock(self.state_dir))
        rc, out, err = timed(run, argv, 30)
        if rc != 0:
            raise _scope.ScopeError("the family is in %s, but the watcher did not start (rc %d): %s. Stopping the scope "
                                    "now ends the server without a drain, and no takeover follows a crash; run the "
                                    "adoption again." % (self.scope, rc, (err or out).strip()[-500:]))
        return {"watcher": self.watcher}
