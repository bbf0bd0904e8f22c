# -*- coding: utf-8 -*-
# Copyright: inferops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""sglang_discover: the server on a port, its family, a wrapper, its capture, the units that could serve the port.
It writes nothing: the capture is kept by the step that acts on the server, once its preflight passed."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import pwd
import time

from ansible_collections.inferops.sglang.plugins.module_utils._server import (
    boot as _boot, model_files as _model_files, port_units as _port_units, readiness as _readiness,
    sglang_args as _sglang_args, weight_cache as _weight_cache)
from ansible_collections.inferops.sglang.plugins.module_utils._server import capture as _capture, family as _family, listeners as _listeners
from ansible_collections.inferops.sglang.plugins.module_utils._host import (
    files as _files, owner as _owner, pagecache as _pagecache, procfs as _procfs, scope as _scope, systemd as _systemd,
    venv as _venv)
from ansible_collections.inferops.sglang.plugins.module_utils._server import multinode as _multinode
from ansible_collections.inferops.sglang.plugins.module_utils._base import Base
from ansible_collections.inferops.sglang.plugins.module_utils._host import caches as _caches, shm as _shm
from ansible_collections.inferops.sglang.plugins.module_utils._host.command import CommandError
from ansible_collections.inferops.sglang.plugins.module_utils._host.redact import Redactor, argv_option
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
        pids = _listeners.listeners(p["port"], procs)
        service = p["unit"] + ".service" if p["unit"] else None
        disabled = _boot.disabled_launchers(service) if service else []
        notes = []  # boot files skipped, and why
        if not pids:
            stored = _stored(p["capture_path"])
            hidden = _listeners.hidden_listeners(p["port"], procs)
            self.module.exit_json(changed=False, found=False, port=p["port"], adhoc=False, family=[],
                                  refusals=self.refusals(stored),
                                  units=self.units(service, None),
                                  launchers=_boot.launchers(p["port"], notes=notes), launcher_notes=notes,
                                  disabled_launchers=disabled, hidden=hidden,
                                  stored=stored, msg=_listeners.hidden_message(p["port"], hidden)
                                  if hidden else "nothing listens on port %d" % p["port"],
                                  model_files=self.model_files(stored, warm=True), shm=None,
                                  caches=self.stored_caches(stored), python=python_of(stored),
                                  restarts=self.restarts(service), elapsed=self.elapsed())
        server = _listeners.main_process(pids[0], procs)
        fam = _family.family_of(server, procs)
        cap = _capture.capture(server.pid)
        wrapper = _family.wrapper(server, procs)
        if wrapper and wrapper["kind"] == "shell loop":
            cap["wrapper"] = _capture.capture(wrapper["pid"])  # a rollback starts the loop again, not the server
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
                      unit_state=unit_state, restarts=self.restarts(service),
                      family=[procs[pid].as_dict(self.redact) for pid in fam if pid in procs],
                      wrapper=wrapper, capture=public, adhoc=owner != service, disabled_launchers=disabled,
                      sglang=_family.is_sglang(server), units=self.units(service, server.pid),
                      launchers=_boot.launchers(p["port"], (wrapper or {}).get("script"), (wrapper or {}).get("user"),
                                                notes=notes),
                      launcher_notes=notes)
        for u in result["units"]:
            if u["holds_port"] and not u["managed"] and service:
                self.module.warn("port %d is served by %s, not by %s" % (p["port"], u["unit"], service))
        result["url"] = _listeners.local_url(p["port"])
        result["multinode"] = multinode(p["port"], cap["argv"]) if result["sglang"] else None
        follower = bool(result["multinode"] and result["multinode"]["role"] == "rank >= 1")
        if result["sglang"] and not follower:  # a rank >= 1 serves no /v1/models
            result["model"], result["running_version"] = served(p["port"], cap["argv"], server.pid)
        # the service serves: what a restart of it would run. A server that said no version (a rank >= 1 has no API
        # to say it; a busy one may not answer in time) gets the installed one asked whoever serves: the caches'
        # places, and so the unit's environment, depend on it, and must be alike on the first run and a rerun
        if result["sglang"] and (owner == service or not result.get("running_version")):
            result["installed_version"], result["installed_note"] = installed(cap["argv"], server.uid)
            result["upgrade"] = upgrade(result.get("running_version"), result["installed_version"])
        if wrapper:
            wrapper["cmdline"] = self.redact(wrapper["cmdline"])
        for row in result["launchers"]:
            row["line"] = self.redact(row["line"])
        # an adopted server's wrapper loop is gone: its capture, taken before, stays as it was (a rollback restarts it)
        scope = _scope.scope_of(server.pid)
        result["adopted"] = scope if service and scope == _scope.names(p["unit"])[0] else None
        # what a switch keeps (the server outside the unit - or in a unit of its name the operator wrote -, not
        # adopted: an adopted server's capture, taken before its wrapper loop was stopped, stays as it was), else what
        # was kept
        mine = owner == service and any(u["managed"] and u["ours"] for u in result["units"])
        fresh = not mine and result["sglang"] and not result["adopted"]
        result["stored"] = (cap if fresh else _stored(p["capture_path"])) if p["capture_path"] else {}
        result["refusals"] = self.refusals(result["stored"] or (cap if fresh else {}))
        # what a switch will load: warm it now, while the old server serves (not when the unit serves already)
        result["model_files"] = self.model_files(cap if result["sglang"] else result["stored"], warm=owner != service)
        version = result.get("running_version") or result.get("installed_version")
        result["shm"] = _shm.usage(version, server.user)
        # the environment a unit gets is that of the capture it is made from (the stored one once a cutover kept it):
        # a rerun reads the unit's own server, whose environment holds what the first run gave it
        result["caches"] = caches(cap, result["stored"] or cap, server.user, version, p.get("user") or server.user)
        result["python"] = python_of(result["stored"] or cap)
        # the unit's weight cache daemon (cutover_weight_cache), when it has one: its state, GPU memory and loads
        result["weight_cache"] = _weight_cache.reading(self.module.run_command, service, p["unit"] + "-weights.service",
                                                       procs) if service else None
        result["elapsed"] = self.elapsed()
        self.module.exit_json(**result)

    def stored_caches(self, stored):
        """With nothing on the port (a switch between its stop and its start, a server that is down): the caches of
        the capture the unit is made from, and so the unit's environment, as they are with its server up (the
        installed version asked). Without a capture, those of the command the unit is made from alone (command, run
        as user, else root): the environment its own server's look gives on the next run. None without either."""
        if not (stored or {}).get("argv"):
            stored = self.planned()
        if not stored.get("argv") or stored.get("uid") is None:
            return None
        version = installed(stored["argv"], stored["uid"])[0]
        return caches(stored, stored, stored.get("user"), version, self.params.get("user") or stored.get("user"))

    def planned(self):
        """What a capture would say of the unit made from variables alone: its command, the environment's HOME and
        cache variables (CACHE_VARIABLES, all that the caches' places depend on), its user (root when none is given);
        {} without a command, or for a user this host does not know."""
        p = self.params
        user = p.get("user") or "root"
        if not p.get("command") or _caches.home_of(user) is None:
            return {}
        env = dict((k, str(v)) for k, v in (p.get("environment") or {}).items() if k in _caches.CACHE_VARIABLES)
        return {"argv": list(p["command"]), "environment": env, "user": user, "uid": pwd.getpwnam(user).pw_uid}

    def refusals(self, cap):
        """Why the capture must not be run again (_capture.refusals), secrets masked; [] without a capture."""
        p = self.params
        return [self.redact(x) for x in _capture.refusals(cap, p.get("user") or "", p.get("group") or "")] if cap else []

    def units(self, service, server_pid):
        """The system units that could serve the port (_port_units.find), the managed one included."""
        return _port_units.find(self.params["port"], self.module.run_command, service, server_pid, redact=self.redact)

    def restarts(self, service):
        """The unit's restarts by systemd, by reason (_systemd.restarts) with a summary line; None without a unit or a
        readable journal."""
        if not service:
            return None
        found = _systemd.restarts(self.module.run_command, service)
        if found is not None:
            found["summary"] = _restarts_summary(found)
        return found

    def model_files(self, cap, warm):
        """The weight files of the captured command, how much of them the page cache holds, and the warm's result
        (with prewarm=auto, outside check mode, when warm is true; with prewarm=plan, whether one is due), or None
        without a capture: each found, measured
        and read by the captured user, in a child that became that user."""
        p = self.params
        if not cap or not cap.get("argv"):
            return None
        if cap.get("uid") is None:  # never root by default
            return {"files": 0, "bytes": 0, "paths": [], "msg": "not measured: the capture names no uid to read as",
                    "summary": "model: not measured (the capture names no uid)"}
        # as the server's user: only what it may list and read is named, measured and read
        owner = _owner.Owner(cap["uid"], cap.get("gid"))
        try:
            m = owner.call(_model_files.locate, cap["argv"], cap.get("environment") or {}, cap.get("cwd"),
                           cap.get("user"))
            held = owner.call(_pagecache.residency, m["paths"])
        except OSError as e:
            return {"files": 0, "bytes": 0, "paths": [], "msg": "not measured as %s: %s" % (owner, e),
                    "summary": "model: not measured as %s" % owner}
        m.update(resident=held["resident"], available=_pagecache.mem_available(), errors=held["errors"], warm=None,
                 warm_due=False)
        if p["prewarm"] == "off" or not m["files"]:
            pass
        elif self.module.check_mode:
            m["warm_skipped"] = "check mode"
        elif not warm:
            m["warm_skipped"] = "the unit serves the port already"
        elif held["resident"] >= m["bytes"]:
            m["warm_skipped"] = "all resident"
        elif p["prewarm"] == "plan":  # model_prewarm reads them, in a call of its own
            m["warm_due"] = True
        else:
            try:
                m["warm"] = owner.call(_pagecache.warm, m["paths"], int(p["prewarm_margin_gib"] * _pagecache.GIB),
                                       p["prewarm_budget"], _pagecache.READERS, self._progress)
            except OSError as e:
                m["warm_skipped"] = "the warm as %s failed: %s" % (owner, e)
        m["summary"] = _model_files.summary(m)
        return m

    def _progress(self, done):
        self.module.log("sglang_discover prewarm: %s of %s read in %s s"
                        % (_model_files.size(done["read"]), _model_files.size(done["planned"]), done["seconds"]))


def _restarts_summary(found):
    """One line of the unit's restarts: how many, by reason, the last one's time and why."""
    if not found["total"]:
        return "no restart by systemd in the journal"
    last = found["last"]
    when = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(last["at"])) if last.get("at") else "?"
    return "%d restart(s) by systemd (%s); the last at %s, %s%s" % (
        found["total"], ", ".join("%s %d" % kv for kv in sorted(found["reasons"].items())), when, last["reason"],
        (": " + last["why"]) if last.get("why") else "")


def caches(cap, source, user, version, unit_user):
    """The caches the running server (cap) uses, their sizes, and the environment that gives a unit of unit_user,
    made from the capture source, the same ones."""
    return {"found": _caches.report(cap.get("environment") or {}, None, user, version),
            "environment": _caches.unit_environment(source.get("environment") or {}, None, user, version, unit_user)}


def _stored(path):
    """What the capture file holds ({} when there is none)."""
    return (_files.read_json(path) or {}) if path else {}


def multinode(port, argv):
    """The server's place in a multi-node server (_multinode.of_argv) with why it is not cut over alone, or None."""
    found = _multinode.of_argv(argv)
    return dict(found, refusal=_multinode.refusal(port, argv)) if found else None


def served(port, argv, pid, timeout=5.0):
    """(the first model /v1/models names, the SGLang version /server_info names) of the server listening on port,
    each None when it does not say (asked with its own --api-key, which goes only to a connection that the family of
    pid, the server found, accepted)."""
    url = _listeners.local_url(port)
    if not url:
        return None, None
    server = _readiness.Server(url, api_key=argv_option(argv, "--api-key"),
                               owner=lambda sock: _listeners.peer_problem(sock, pid=pid))
    names = _readiness.model_names(server.request("/v1/models", timeout=timeout))
    return (names[0] if names else None), _readiness.server_version(server, timeout)


def python_of(cap):
    """The Python the captured server's command runs on (a console script's, from its shebang on this host), or None:
    what a unit of its own (SGLang's weight cache daemon) runs with."""
    return _sglang_args.interpreter((cap or {}).get("argv"))[0]


def installed(argv, uid):
    """(the SGLang version installed where the server's command runs from, None or why it was not asked): its
    interpreter asked as the server's own user (uid), with a clean environment; as root only when no other user can
    change what root would run."""
    python = _sglang_args.interpreter(argv)[0]
    if not python:
        return None, "the server's command names no Python interpreter to ask"
    owner = _owner.Owner(uid)
    if owner.is_root:
        why = _venv.distrust(python)
        if why:
            return None, "%s was not asked: it would run as root, and %s" % (python, why)
    version, why = _sglang_args.version(python, _sglang_args.ask_version(python, owner), timeout=30)
    return version, ("; ".join(why) or None)


def upgrade(running, installed_version):
    """What changed under a serving server ({installed, running, summary}, their local parts aside), or None when both
    say the same version, or either is unknown."""
    new, old = _sglang_args.public(installed_version), _sglang_args.public(running)
    if not (new and old) or new == old:
        return None
    return dict(installed=new, running=old, summary="installed %s, running %s" % (new, old))
