# -*- coding: utf-8 -*-
# Copyright: inferops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The preflight: what serves a port and what a switch (or an adoption) of it would touch, looked at before
anything is stopped. It changes nothing; the switch's worker looks again with it when it begins."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.inferops.sglang.plugins.module_utils._server import (
    family as _family, listeners as _listeners, multinode as _multinode, sglang_args as _sglang_args)
from ansible_collections.inferops.sglang.plugins.module_utils._host import (
    nvidia as _nvidia, procfs as _procfs, systemd as _systemd)
from ansible_collections.inferops.sglang.plugins.module_utils._host.command import CommandError, run_command
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
        rc, out, dummy = _systemd.systemctl(run, _systemd.Verbs.SHOW, unit, 15, properties="MainPID", value=True)
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
    return dict(insp, owner=None, server=None, family=[], wrapper=None, gpus=[], strays=[], protected=[], problems=[],
                neighbours=[], warnings=[], gpus_from=None, gpu_memory=None)


def decide_gpus(server, smi, given=None):
    """(the server's GPUs, where they come from, why they cannot be known or None). Only what places the server
    decides them: `given` (the operator's list), else its argv (--base-gpu-id, --gpu-id-step, --tp/--dp/--pp sizes,
    this node's share with --nnodes) through its CUDA_VISIBLE_DEVICES. Never a device file a process holds, nor a
    process title: the server's owner sets both."""
    if given:
        return sorted(set(int(g) for g in given)), "given (gpus)", None
    try:
        logical = _sglang_args.gpu_ids(server.argv)
    except ValueError as e:
        return [], None, str(e)
    cvd = _procfs.environ(server.pid).get("CUDA_VISIBLE_DEVICES")
    uuids = {}
    if cvd and "GPU-" in cvd and smi.available:
        try:
            uuids = smi.uuids()
        except (RuntimeError, OSError, ValueError, KeyError, CommandError):
            uuids = {}
    try:
        shown = _nvidia.visible(cvd, uuids)
    except ValueError as e:
        return [], None, str(e)
    if shown is None:
        return logical, "its arguments (GPUs %s)" % logical, None
    if any(i >= len(shown) for i in logical):
        return [], None, "its arguments place it on GPUs %s of the %d that CUDA_VISIBLE_DEVICES=%s shows it" % (
            logical, len(shown), cvd)
    return sorted(set(shown[i] for i in logical)), "its arguments (GPUs %s) through CUDA_VISIBLE_DEVICES=%s" % (
        logical, cvd), None


def neighbours(procs, fam, listening):
    """{pid: port} of the processes of every other SGLang server's family: a server (not of fam) that listens on a
    port of its own, and its family. A neighbour is never a stray: it serves."""
    out = {}
    for q in procs.values():
        if q.pid in fam or q.is_zombie or q.pid not in listening or not _family.is_sglang(q):
            continue
        parent = procs.get(q.ppid)
        if parent is not None and parent.cmdline == q.cmdline:
            continue  # a forked child of a server: its main process counts
        for pid in _family.family_of(q, procs):
            if pid not in fam:
                out.setdefault(pid, listening[q.pid][0])
    return out


def memory_check(fam, shared, smi, fraction):
    """Whether the GPU memory the old family frees on each GPU it shares with a neighbour is what the new unit needs
    (--mem-fraction-static of the GPU's memory): ({known, why, gpus: [{index, total_mib, used_mib, freed_mib,
    free_after_mib, needs_mib}]}, [problems])."""
    if not shared:
        return None, []
    if fraction is None:
        return {"known": False, "why": "the unit's command gives no --mem-fraction-static (SGLang picks one by the "
                                       "GPU's size)"}, []
    if not smi.available:
        return {"known": False, "why": "nvidia-smi is not there to read the GPUs' memory"}, []
    try:
        totals = smi.totals()
        reading = smi.reading()
    except (RuntimeError, OSError, ValueError, KeyError, CommandError) as e:
        return {"known": False, "why": "nvidia-smi could not be read: %s" % e}, []
    rows, problems = [], []
    for g in reading["gpus"]:
        i = g["index"]
        if i not in shared or totals.get(i) is None or g["memory_used_mib"] is None:
            continue
        freed = sum(a["used_memory_mib"] or 0 for a in reading["compute_apps"] if a["gpu"] == i and a["pid"] in fam)
        free_after = totals[i] - g["memory_used_mib"] + freed
        needs = int(fraction * totals[i])
        rows.append({"index": i, "total_mib": totals[i], "used_mib": g["memory_used_mib"], "freed_mib": freed,
                     "free_after_mib": free_after, "needs_mib": needs})
        if free_after < needs:
            problems.append("GPU %d, shared with another SGLang server: the unit needs %d MiB (--mem-fraction-static "
                            "%g of %d MiB), and once the old family's %d MiB are freed only %d MiB are free" % (
                                i, needs, fraction, totals[i], freed, free_after))
    return {"known": True, "why": None, "gpus": rows}, problems


def store_holders(command, procs, members, service, flags=()):
    """Why rank 0 of a multi-node server, run by `command` (its unit's), could not start: its --dist-init-addr port,
    where it hosts the group's store, is held outside the server's family (members) and the unit. A rank 0 launched
    by hand that still waits for its other ranks listens there and not yet on --port, so the port alone shows
    nothing. [] for any other command."""
    multi = _multinode.of_argv(command or ())
    store = _multinode.store_port(multi)
    if store is None or multi["node_rank"] != 0:
        return []
    problems = []
    for pid in _listeners.listeners(store, procs):
        if pid in members or _procfs.unit_of(pid) == service:
            continue
        problems.append("port %d of --dist-init-addr, where the unit's rank 0 hosts its group's store, is held by "
                        "pid %d (%s), so that rank 0 could not start: a rank 0 launched by hand that still waits for "
                        "its other ranks listens there, not yet on --port. Stop it, or start its other ranks so that "
                        "it serves, then cut over again" % (
                            store, pid, redactor_for(procs[pid], flags)(procs[pid].cmdline)[:200]))
    hidden = _listeners.hidden_listeners(store, procs)
    if hidden:
        problems.append(_listeners.hidden_message(store, hidden) + " (rank 0's --dist-init-addr)")
    return problems


def inspect(port, unit, devices=_nvidia.DEFAULT_DEVICES, procs=None, run=run_command, flags=(), taken=(), rank=None,
            gpus=None, release_users=(), command=None, weights=None):
    """What serves `port` and what a switch to `unit` (a name without .service) would touch; `rank`, when the switch
    is one rank's of a multi-node server switched as a group (the server must be that rank).

    owner (states.Owners): None (nothing listens), adhoc (a server outside the unit) or unit (the unit's own).
    problems: reasons the switch must not begin (anything that listens but is not an SGLang server,
    another service whose main process is the server - unless it is one the switch takes over, in `taken` -,
    listeners outside the family).
    gpus: the server's GPUs (decide_gpus: `gpus` when given, else its arguments and CUDA_VISIBLE_DEVICES), gpus_from
    where they come from; warnings: what the caller should say (the GPUs cannot be known, nvidia-smi disagrees).
    neighbours: the processes of other SGLang servers (each listening on a port of its own) on the server's GPUs:
    never strays. gpu_memory: with neighbours, whether the old family frees what `command` (the unit's) needs.
    strays: processes outside the family on the server's GPUs (not protected, not neighbours): the caller decides.
    Each says the ports it serves on (`serves`: never released) and whether the switch may release it
    (`releasable`: it serves nothing, and it is the server's user's or of a user in release_users).
    weight_cache: the processes of `weights` (the unit's weight cache daemon, a name without .service, when it has
    one) that hold the server's GPUs: they keep the weights the unit maps, and are neither family nor strays.
    With `command` rank 0's of a multi-node server, its --dist-init-addr port held outside the family and the unit is
    a problem too (store_holders).
    """
    procs = _procfs.snapshot() if procs is None else procs
    service = unit + ".service"
    out = {"port": port, "unit": service, "owner": None, "server": None, "family": [], "wrapper": None,
           "gpus": [], "strays": [], "protected": [], "problems": [], "neighbours": [], "warnings": [],
           "gpus_from": None, "gpu_memory": None, "weight_cache": []}
    pids = _listeners.listeners(port, procs)
    if not pids:
        hidden = _listeners.hidden_listeners(port, procs)
        if hidden:
            out["problems"].append(_listeners.hidden_message(port, hidden))
        out["problems"].extend(store_holders(command, procs, (), service, flags))
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
    out["problems"].extend(store_holders(command, procs, fam, service, flags))
    holders = _nvidia.holders(procs, devices)
    smi = _nvidia.Smi(run)
    gpus, out["gpus_from"], unknown = decide_gpus(server, smi, gpus)
    out["gpus"] = gpus
    if unknown:
        out["warnings"].append(
            "the GPUs of the server on port %d cannot be known: %s. No process outside its family is refused or "
            "released for them; name them with gpus (cutover_gpus)" % (port, unknown))
    seen = _nvidia.on_gpus(smi, fam)
    if seen and gpus and seen - set(gpus):
        out["warnings"].append("nvidia-smi lists the server's family on GPUs %s, outside the GPUs %s: %s; those count "
                               "for nothing: name them with gpus (cutover_gpus) if they are the server's" % (
                                   sorted(seen - set(gpus)), out["gpus_from"], gpus))
    listening = _listeners.listening_ports(procs)
    near = neighbours(procs, fam, listening)
    allowed = set(str(u) for u in release_users or ())
    selector = Selector(required=False)
    ancestors = set(_procfs.ancestors(selector.me, procs))
    for pid in members:
        why = selector.refusal(procs[pid], ancestors) if pid in procs else None
        if why:  # the family is stopped without the selector's refusals: none of them may be in it
            out["problems"].append("pid %d (%s) is of the server's family and is never stopped: %s" % (
                pid, redact(procs[pid].cmdline)[:200], why))
    shared = set()
    for h in holders:
        if h.proc.pid in fam or h.proc.is_zombie or not set(h.gpus) & set(gpus):
            continue
        row = _row(h.proc, redact, devices=h.files, gpus=h.gpus)
        if weights and _procfs.unit_of(h.proc.pid) == weights + ".service":
            out["weight_cache"].append(row)
            continue
        if h.proc.pid in near:
            out["neighbours"].append(dict(row, port=near[h.proc.pid]))
            shared.update(set(h.gpus) & set(gpus))
            continue
        why = selector.refusal(h.proc, ancestors)
        if why:
            out["protected"].append(dict(row, reason=why))
        else:
            serves = listening.get(h.proc.pid, [])
            theirs = h.proc.uid == server.uid or str(h.proc.uid) in allowed or _procfs.user_name(h.proc.uid) in allowed
            out["strays"].append(dict(row, serves=serves, releasable=bool(theirs and not serves)))
    if shared and command:
        out["gpu_memory"], short = memory_check(fam, shared, smi, _sglang_args.mem_fraction(command))
        out["problems"].extend(short)
        if not out["gpu_memory"]["known"]:
            out["warnings"].append("GPUs %s are shared with another SGLang server: whether the memory the old family "
                                   "frees is what the unit needs cannot be known: %s" % (
                                       sorted(shared), out["gpu_memory"]["why"]))
    return out
