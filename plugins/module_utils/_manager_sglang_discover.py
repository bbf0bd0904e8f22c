# -*- coding: utf-8 -*-
# Copyright: inferops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""sglang_discover: the server on a port, its family, a wrapper, its capture."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json

from ansible_collections.inferops.sglang.plugins.module_utils import (
    _boot, _discover, _files, _model_files, _pagecache, _procfs, _readiness, _scope, _systemd)
from ansible_collections.inferops.sglang.plugins.module_utils._base import Base
from ansible_collections.inferops.sglang.plugins.module_utils._command import CommandError
from ansible_collections.inferops.sglang.plugins.module_utils._redact import Redactor, argv_option
from ansible_collections.inferops.sglang.plugins.module_utils._specs import check_port


class SglangDiscover(Base):
    """Finds the server on a port, its family, a supervising wrapper, and captures what it runs."""

    def run(self):
        p = self.params
        check_port(p["port"], self.fail)
        if p["prewarm_budget"] < 0 or p["prewarm_margin_gib"] < 0:
            self.fail("prewarm_budget and prewarm_margin_gib must be >= 0, not %r and %r"
                      % (p["prewarm_budget"], p["prewarm_margin_gib"]))
        procs = _procfs.snapshot()
        pids = _discover.listeners(p["port"], procs)
        service = p["unit"] + ".service" if p["unit"] else None
        disabled = _boot.disabled_launchers(service) if service else []
        if not pids:
            stored = _stored(p["capture_path"])
            hidden = _discover.hidden_listeners(p["port"], procs)
            self.module.exit_json(changed=False, found=False, port=p["port"], adhoc=False, family=[],
                                  launchers=_boot.launchers(p["port"]), disabled_launchers=disabled, hidden=hidden,
                                  stored=stored, msg=_discover.hidden_message(p["port"], hidden)
                                  if hidden else "nothing listens on port %d" % p["port"],
                                  model_files=self.model_files(stored, warm=True), elapsed=self.elapsed())
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
                      launchers=_boot.launchers(p["port"], [wrapper.get("script")] if wrapper else []))
        if result["sglang"]:
            result["model"] = served_model(p["port"], cap["argv"])
        if wrapper:
            wrapper["cmdline"] = self.redact(wrapper["cmdline"])
        for row in result["launchers"]:
            row["line"] = self.redact(row["line"])
        # an adopted server's wrapper loop is gone: its capture, taken before, stays as it was (a rollback restarts it)
        scope = _scope.scope_of(server.pid)
        result["adopted"] = scope if service and scope == _scope.names(p["unit"])[0] else None
        if p["capture_path"] and owner != service and result["sglang"] and not result["adopted"]:
            capture = _files.File(p["capture_path"], json.dumps(cap, indent=2, sort_keys=True), 0o600, dir_mode=0o700)
            result["changed"] = capture.differs
            self.write_files([capture], **result)
            result["capture_path"] = p["capture_path"]
            result["stored"] = cap
        else:
            result["stored"] = _stored(p["capture_path"])
        # what a switch will load: warm it now, while the old server serves (not when the unit serves already)
        result["model_files"] = self.model_files(cap if result["sglang"] else result["stored"], warm=owner != service)
        result["elapsed"] = self.elapsed()
        self.module.exit_json(**result)

    def model_files(self, cap, warm):
        """The weight files of the captured command, how much of them the page cache holds, and the warm's result
        (with prewarm=auto, outside check mode, when warm is true), or None without a capture."""
        p = self.params
        if not cap or not cap.get("argv"):
            return None
        m = _model_files.locate(cap["argv"], cap.get("environment") or {}, cap.get("cwd"), cap.get("user"))
        held = _pagecache.residency(m["paths"])
        m.update(resident=held["resident"], available=_pagecache.mem_available(), errors=held["errors"], warm=None)
        if p["prewarm"] == "off" or not m["files"]:
            pass
        elif self.module.check_mode:
            m["warm_skipped"] = "check mode"
        elif not warm:
            m["warm_skipped"] = "the unit serves the port already"
        elif held["resident"] >= m["bytes"]:
            m["warm_skipped"] = "all resident"
        else:
            m["warm"] = _pagecache.warm(m["paths"], int(p["prewarm_margin_gib"] * _pagecache.GIB), p["prewarm_budget"],
                                        progress=self._progress)
        m["summary"] = _model_files.summary(m)
        return m

    def _progress(self, done):
        self.module.log("sglang_discover prewarm: %s of %s read in %s s"
                        % (_model_files.size(done["read"]), _model_files.size(done["planned"]), done["seconds"]))


def _stored(path):
    """What the capture file holds ({} when there is none)."""
    return (_files.read_json(path) or {}) if path else {}


def served_model(port, argv, timeout=5.0):
    """The first model /v1/models names on the server listening on port (asked with its own --api-key), or None."""
    url = _discover.local_url(port)
    if not url:
        return None
    server = _readiness.Server(url, api_key=argv_option(argv, "--api-key"))
    names = _readiness.model_names(server.request("/v1/models", timeout=timeout))
    return names[0] if names else None
