# -*- coding: utf-8 -*-
# Copyright: inferops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The preflight: what serves a port and what a switch (or an adoption) of it would touch, looked at before
anything is stopped. It changes nothing; the switch's worker looks again with it when it begins."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.inferops.sglang.plugins.module_utils._server import family as _family, listeners as _listeners, multinode as _multinode
from ansible_collections.inferops.sglang.plugins.module_utils._host import nvidia as _nvidia, procfs as _procfs
from ansible_collections.inferops.sglang.plugins.module_utils._host.command import CommandError, run_command, timed
from ansible_collections.inferops.sglang.plugins.module_utils._host.redact import Redactor
from ansible_collections.inferops.sglang.plugins.module_utils._host.selection import Selector
from ansible_collections.inferops.sglang.plugins.module_utils._switch.states import Owners


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


def vacant(insp, procs):
    """For a rollback: inspect's answer when a program that is not an SGLang server holds the port (one that took it
    while the unit loaded), as if nothing listened - the unit is stopped all the same, nothing of that program is
    touched, and the captured command starts once the port is free. insp unchanged otherwise."""
    server = insp["server"] and procs.get(insp["server"]["pid"])
    if insp["owner"] != Owners.ADHOC or server is None or _family.is_sglang(server):
        return insp
    return dict(insp, owner=None, server=None, family=[], wrapper=None, gpus=[], strays=[], protected=[], problems=[])


def inspect(port, unit, devices=_nvidia.DEFAULT_DEVICES, procs=None, run=run_command, flags=(), taken=(), rank=None):
    """What serves `port` and what a switch to `unit` (a name without .service) would touch; `rank`, when the switch
    is one rank's of a multi-node server switched as a group (the server must be that rank).

    owner (states.Owners): None (nothing listens), adhoc (a server outside the unit) or unit (the unit's own).
    problems: reasons the switch must not begin (anything that listens but is not an SGLang server,
    another service whose main process is the server - unless it is one the switch takes over, in `taken` -,
    listeners outside the family).
    strays: processes outside the family on the server's GPUs (not protected): the caller decides.
    """
    procs = _procfs.snapshot() if procs is None else procs
    service = unit + ".service"
    out = {"port": port, "unit": service, "owner": None, "server": None, "family": [], "wrapper": None,
           "gpus": [], "strays": [], "protected": [], "problems": []}
    pids = _listeners.listeners(port, procs)
    if not pids:
        hidden = _listeners.hidden_listeners(port, procs)
        if hidden:
            out["problems"].append(_listeners.hidden_message(port, hidden))
        return out
    server = _listeners.main_process(pids[0], procs)
    redact = redactor_for(server, flags)
    out["server"] = _row(server, redact, unit=_procfs.unit_of(server.pid))
    if out["server"]["unit"] == service:
        out["owner"] = Owners.UNIT
        members = sorted(p.pid for p in procs.values() if not p.is_zombie and _procfs.unit_of(p.pid) == service)
    else:
        out["owner"] = Owners.ADHOC
        members = _family.family_of(server, procs)
        out["wrapper"] = _family.wrapper(server, procs)
        if out["wrapper"]:
            w = procs[out["wrapper"]["pid"]]
            out["wrapper"].update(starttime=w.starttime, cmdline=redact(w.cmdline))
        if not _family.is_sglang(server):
            out["problems"].append("port %d is held by pid %d (%s), which is not an SGLang server" % (
                port, server.pid, redact(server.cmdline)[:200]))
        elif _multinode.of_argv(server.argv) or rank is not None:
            why = _multinode.refusal(port, server.argv, rank=rank)
            if why:
                out["problems"].append(why)
        other = out["server"]["unit"]
        if other and other not in taken and main_pid(run, other) == server.pid:
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
    gpus = out["gpus"] = _nvidia.gpus_of(holders, fam, _nvidia.Smi(run))
    selector = Selector(required=False)
    ancestors = set(_procfs.ancestors(selector.me, procs))
    for pid in members:
        why = selector.refusal(procs[pid], ancestors) if pid in procs else None
        if why:  # the family is stopped without the selector's refusals: none of them may be in it
            out["problems"].append("pid %d (%s) is of the server's family and is never stopped: %s" % (
                pid, redact(procs[pid].cmdline)[:200], why))
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
