# -*- coding: utf-8 -*-
# Copyright: inferops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

# Documented in cutover_group.yml beside this file: the group stage's filter (cutover_group); the functions it calls
# are plain functions, tested each on its own, and a host's rank (rank_of), which the plan stage's filter gives.

import hashlib
import json

from ansible_collections.inferops.sglang.plugins.module_utils._host import systemd as _systemd
from ansible_collections.inferops.sglang.plugins.module_utils._server import multinode as _multinode


def rank_of(argv):
    """This host's place in a multi-node server, from the command its unit runs: {nnodes, node_rank, dist_init_addr,
    role, same} - same: a digest of the server's arguments (argv less its interpreter, each host's own venv) without
    --node-rank, equal on every rank of one server (its secrets masked first by the caller) -, or None for a server
    on one host."""
    found = _multinode.of_argv(argv)
    if found is None:
        return None
    same = json.dumps(_without_rank(list(argv)[1:]))
    return dict(found, same=hashlib.sha256(same.encode("utf-8")).hexdigest()[:16])


def _without_rank(argv):
    """argv less its --node-rank option (and value), in every spelling argparse takes."""
    out, words, i = [], [str(a) for a in argv], 0
    while i < len(words):
        dest, value = _multinode.option(words[i])
        if dest == "node_rank":
            i += 1 if value is not None else 2
            continue
        out.append(words[i])
        i += 1
    return out


def group_problems(members, hosts, group):
    """Why the ranks of the multi-node server of `group` are not one whole server, one line each; empty when they are.
    members: one a host of `hosts` (the group's), in order - {host, rank} (rank: rank_of(argv) of the command its unit
    will run, None for a server on one host), or None where the host has no plan. Every rank 0..N-1 once, N the
    group's size and every rank's --nnodes, and the same command on every rank apart from --node-rank."""
    out, ranks = [], []
    for host, m in zip(hosts, members):
        if not isinstance(m, dict):
            out.append("%s: no plan (its discovery or its plan failed, or it is not in this run)" % host)
        elif m.get("rank") is None:
            out.append("%s: its server is not one rank of a multi-node server (no --nnodes above 1)" % host)
        else:
            ranks.append(m)
    if not ranks:
        return out or ["the inventory group %s has no host" % group]
    size = len(hosts)
    for m in ranks:
        if m["rank"]["nnodes"] != size:
            out.append("%s: --nnodes %s, but the inventory group %s has %d hosts" % (
                m["host"], m["rank"]["nnodes"], group, size))
    seen = {}
    for m in ranks:
        seen.setdefault(m["rank"]["node_rank"], []).append(m["host"])
    for rank, where in sorted(seen.items(), key=lambda kv: str(kv[0])):
        if len(where) > 1:
            out.append("rank %s is on %s: each rank once" % (rank, " and ".join(where)))
    absent = [r for r in range(size) if r not in seen]
    if absent:
        out.append("rank %s of %d %s on no host of the group: a rank missing (the server would load until its "
                   "--dist-timeout)" % (", ".join(str(r) for r in absent), size, "is" if len(absent) == 1 else "are"))
    kinds = {}
    for m in ranks:
        kinds.setdefault(m["rank"]["same"], []).append("%s (rank %s)" % (m["host"], m["rank"]["node_rank"]))
    if len(kinds) > 1:
        out.append("the ranks' commands differ apart from --node-rank: %s" % " | ".join(
            "%s run%s one" % (", ".join(where), "" if len(where) > 1 else "s") for where in kinds.values()))
    return out


def group_failures(results, members):
    """What failed on the ranks of a group at one step, one line a rank: results one a rank's host, in the order of
    members ({host, rank}), each the step's registered result there (None: the host never ran it)."""
    out = []
    for result, m in zip(results, members):
        where = "%s (rank %s)" % (m["host"], m["rank"]["node_rank"])
        if not isinstance(result, dict) or not result or result.get("skipped"):
            out.append("%s: did not run it" % where)
        elif result.get("failed"):
            out.append("%s: %s" % (where, result.get("msg") or "failed"))
    return out


def group_units(results, members):
    """The ranks >= 1 whose unit does not run once rank 0 served, one line each: results one a rank, in the order of
    members, each `systemctl show UNIT --property=ActiveState,SubState,NRestarts,MainPID`'s registered result (rank 0's
    is not asked: its wait said)."""
    out = []
    for result, m in zip(results, members):
        if m["rank"]["node_rank"] == 0:
            continue
        where = "%s (rank %s)" % (m["host"], m["rank"]["node_rank"])
        if not isinstance(result, dict) or result.get("skipped") or "stdout" not in result:
            out.append("%s: its unit was not looked at" % where)
            continue
        state = _systemd.properties_of(result["stdout"])
        if state.get("ActiveState") != "active" or state.get("NRestarts", "0") != "0":
            out.append("%s: its unit is %s (%s), restarted %s times" % (
                where, state.get("ActiveState"), state.get("SubState"), state.get("NRestarts")))
    return out


def group_record(stops, members, group, rank):
    """What a rank's record keeps of its group: the group's name, its size and this host's rank, every rank's host,
    the host of rank 0, each rank's stop (its steps, or why it failed) and when rank 0's stop began (the group's
    downtime counts from it). stops: one a rank, in the order of members, its stop's registered result."""
    leader = next((m["host"] for m in members if m["rank"]["node_rank"] == 0), None)
    ranks, began = [], None
    for result, m in zip(stops, members):
        result = result if isinstance(result, dict) else {}
        outcome = result.get("outcome") or {}
        ranks.append(dict(host=m["host"], rank=m["rank"]["node_rank"], stop=result.get("msg") or "not run",
                          seconds=outcome.get("seconds")))
        if m["host"] == leader:
            began = outcome.get("stop_began_at")
    return dict(name=group, nnodes=len(members), rank=rank, leader=leader, ranks=ranks, stop_began_at=began)


def cutover_group(members, group, rank=None, hosts=None, preflight=None, stop=None, start=None, unit=None):
    """The group stage of a multi-node server, one mapping, with the keys of what is given. members: one a host of the
    group, in order, {host, rank}; each step's results one a rank, in the order of members, each the step's registered
    result there (None: the host never ran it).
    hosts (the group's, at the plan: a member may be None there): `problems`, why the ranks are not one whole server;
    preflight: `refused`, what failed at each rank's preflight;
    stop: `stop_failures`, where the stop failed; `stop_began`, whether a stop's worker ran on some rank (the server may
    be down); and, with rank (this host's), `record`, what this rank's record keeps of the group;
    start and unit (each rank's `systemctl show` of its unit): `failures`, what failed at the start, and the ranks >= 1
    whose unit does not run."""
    out = {}
    if hosts is not None:
        out["problems"] = group_problems(members, hosts, group)
    if preflight is not None:
        out["refused"] = group_failures(preflight, members)
    if stop is not None:
        out["stop_failures"] = group_failures(stop, members)
        out["stop_began"] = any(isinstance(r, dict) and "outcome" in r for r in stop)
        if rank is not None:
            out["record"] = group_record(stop, members, group, rank)
    if start is not None or unit is not None:
        out["failures"] = group_failures(start or [], members) + group_units(unit or [], members)
    return out


class FilterModule(object):
    def filters(self):
        return {"cutover_group": cutover_group}
