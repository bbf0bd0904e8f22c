# -*- coding: utf-8 -*-
# Copyright: inferops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""model_wait: wait for a server to load its model and serve."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.inferops.sglang.plugins.module_utils._server import (
    family as _family, listeners as _listeners, readiness as _readiness)
from ansible_collections.inferops.sglang.plugins.module_utils._host import procfs as _procfs, systemd as _systemd
from ansible_collections.inferops.sglang.plugins.module_utils._base import Base
from ansible_collections.inferops.sglang.plugins.module_utils._host.redact import Redactor


class ModelWait(Base):
    def run(self):
        p = self.params
        if p["api_key"]:
            self.redact = Redactor(flags=p.get("redact") or (), values=[p["api_key"]])
        service = p["unit"] if not p["unit"] or "." in p["unit"] else p["unit"] + ".service"
        try:
            server = _readiness.Server(p["url"], api_key=p["api_key"], owner=(
                lambda sock: _listeners.peer_problem(sock, unit=service, pid=p["pid"])) if service or p["pid"] else None)
        except ValueError as e:
            self.fail(str(e))
        if p["timeout"] <= 0:
            self.fail("timeout must be > 0 seconds")
        if self.module.check_mode:
            self.module.exit_json(changed=False, skipped_wait=True, msg="check mode: not waited for %s" % server.url)
        checks, gates = [], []
        if p["pid"]:
            start = _procfs.starttime(p["pid"])
            if start is None:
                self.fail("pid %d is not running: the server cannot come up" % p["pid"], **self.logs())
            checks.append(_procfs.process_alive(p["pid"], start))
        if p["unit"]:
            try:
                watch = _systemd.UnitWatch(self.module.run_command, p["unit"])
            except Exception as e:  # pylint: disable=broad-except
                self.fail("cannot watch unit %s: %s" % (p["unit"], e))
            checks.append(watch.problem)
            gates.append(watch.active)
        if p["unit"] or p["pid"]:
            checks.append(_family.SchedulerWatch(unit=service, pid=p["pid"]).problem)
            if server.is_local():  # another process on the port: the server cannot bind it, the wait fails at once
                checks.append(lambda: _listeners.squatter(server.host, server.port, unit=service, pid=p["pid"]))
                gates.insert(0, lambda: _listeners.listener_problem(server.port, unit=service, pid=p["pid"]))
        try:
            res = _readiness.wait(server, timeout=p["timeout"], ready=p["ready"], models=p["models"],
                                  generate=p["generate"], checks=checks, gates=gates)
        except _readiness.NotReady as e:
            out = dict(e.result)
            out.update(self.logs())
            self.fail(self.redact(str(e)), **out)
        res["url"] = server.url
        res["msg"] = "ready after %.1f s%s" % (res["ready_after"], " serving %s" % res["model"] if res.get("model") else "")
        self.module.exit_json(changed=False, **res)

    def logs(self):
        p = self.params
        if not (p["unit"] or p["log_file"]):
            return {}
        return {"log_lines": _systemd.log_lines(self.module.run_command, self.redact, p["unit"], p["log_file"], p["lines"])}
