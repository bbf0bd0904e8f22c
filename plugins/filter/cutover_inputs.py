# -*- coding: utf-8 -*-
# Copyright: inferops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

# Documented in cutover_inputs.yml beside this file: the inputs stage's filter (cutover_inputs); the functions it
# calls are plain functions, tested each on its own.

import json
import re
import shlex

from ansible_collections.inferops.sglang.plugins.module_utils._host.redact import argv_option
from ansible_collections.inferops.sglang.plugins.module_utils._specs import is_unit_name

# Given blank ("" or null: an AWX question left blank, an empty -e), these are named, not used.
NAMES = ("cutover_unit_name", "cutover_state_dir")
STRINGS = ("cutover_working_directory", "cutover_user", "cutover_group", "cutover_hook_before_stop",
           "cutover_hook_after_serving", "cutover_multinode_group")
LISTS = ("cutover_command", "cutover_extra_args")
# name: the least value
NUMBERS = (("cutover_drain_sec", 0), ("cutover_timeout_start_sec", 1), ("cutover_prewarm_budget_sec", 0),
           ("cutover_prewarm_margin_gib", 0), ("cutover_bench_max_slowdown_pct", 0), ("cutover_record_history", 1))
ENV_NAME = r"^[A-Za-z_][A-Za-z0-9_]*\Z"
# What one entry of cutover_ports may hold, and the role's variable each sets.
SERVER_KEYS = ("port", "unit_name", "command", "extra_args", "environment", "working_directory", "user", "group",
               "gpus")


def _show(value):
    return json.dumps(value) if isinstance(value, (list, dict)) else repr(value)


def _typed(value):
    """value as the user typed it: a number given as a string (-e, AWX) unquoted."""
    if isinstance(value, str) and re.match(r"^\s*-?[0-9]+\s*\Z", value):
        return value.strip()
    return _show(value)


def _whole(value):
    """value as an int when it is a whole number (an int, or a string of digits as -e and AWX give it), else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str) and re.match(r"^\s*-?[0-9]+\s*\Z", value):
        return int(value)
    return None


def port_problem(name, value):
    """The rule a port breaks, with its value; None when it is one."""
    port = _whole(value)
    if port is None:
        return "%s %s: a port is a whole number, 1-65535" % (name, _show(value))
    if not 0 < port < 65536:
        return "%s %s: a port is 1-65535" % (name, _typed(value))
    return None


def unit_name_problem(name, value):
    if not isinstance(value, str):
        return "%s %s: a service's name is a string" % (name, _show(value))
    if value.endswith(".service"):
        return "%s %s: give the service's name without .service (%s)" % (name, _show(value), _show(value[:-8]))
    if not is_unit_name(value):
        return ("%s %s: a service's name has only letters, digits and _ . : - (and an optional @instance), and starts"
                " with a letter or digit" % (name, _show(value)))
    return None


def _list_problems(name, value):
    if isinstance(value, str):
        try:
            split = shlex.split(value)
        except ValueError:
            split = value.split()
        return ["%s is a string (%s): give a list, one argument an element: -e '%s' (JSON), or in YAML one '- '"
                " line an argument" % (name, _show(value), json.dumps({name: split}))]
    if not isinstance(value, (list, tuple)):
        return ["%s %s: a list of strings, one argument an element" % (name, _show(value))]
    return ["%s[%d] is %s, not a string: quote it (%s)" % (name, i, _show(v), json.dumps(str(v)))
            for i, v in enumerate(value) if not isinstance(v, str)]


def input_problems(inputs):
    """Each rule the cutover role's inputs break, one line each, naming the variable, the rule and the value; empty
    when every input is good. Only the inputs given are looked at."""
    out = []
    blank = [n for n in NAMES if n in inputs and inputs[n] in (None, "")]
    blank += [n for n in STRINGS if n in inputs and inputs[n] is None]
    for name in blank:
        out.append('%s is blank ("" or null): give a value, or leave the variable out for its default' % name)
    problem = port_problem("cutover_port", inputs["cutover_port"]) if "cutover_port" in inputs else None
    if problem:
        out.append(problem)
    if "cutover_unit_name" in inputs and "cutover_unit_name" not in blank:
        problem = unit_name_problem("cutover_unit_name", inputs.get("cutover_unit_name"))
        if problem:
            out.append(problem)
    for name in LISTS:
        out.extend(_list_problems(name, inputs.get(name) or []))
    command = inputs.get("cutover_command") or []
    if isinstance(command, list) and command and isinstance(command[0], str) and not command[0].startswith("/"):
        out.append("cutover_command[0] %s: the command starts with an absolute path (the venv's python, e.g. %s)"
                   % (_show(command[0]), _show("/opt/sglang/venv/bin/" + command[0].rsplit("/", 1)[-1])))
    environment = inputs.get("cutover_environment") or {}
    if not isinstance(environment, dict):
        out.append("cutover_environment %s: a mapping of names to strings" % _show(environment))
    else:
        for key in sorted(environment, key=str):
            value = environment[key]
            if not isinstance(key, str) or not re.match(ENV_NAME, key):
                out.append("cutover_environment name %s: letters, digits and _, not starting with a digit" % _show(key))
            if not isinstance(value, str):
                out.append("cutover_environment %s is %s, not a string: quote it (%s)"
                           % (key, _show(value), json.dumps(str(value))))
    argv = [a for a in (command if isinstance(command, list) else []) + (inputs.get("cutover_extra_args") or [])
            if isinstance(a, str)] if isinstance(inputs.get("cutover_extra_args") or [], list) else []
    port = _whole(inputs.get("cutover_port"))
    given = argv_option(argv, "--port")
    if port is not None and given is not None and _whole(given) != port:
        out.append("--port %s in the command or the extra args: it must equal cutover_port (%d), or be left out"
                   % (_typed(given), port))
    for name, least in NUMBERS:
        if name in inputs:
            value = _whole(inputs[name])
            if value is None or value < least:
                out.append("%s %s: a whole number >= %d" % (name, _typed(inputs[name]), least))
    if inputs.get("cutover_weight_cache") and inputs.get("cutover_mode") not in (None, "switch"):
        out.append("cutover_weight_cache with cutover_mode %s: the weight cache daemon's unit is installed by a switch, "
                   "not by an adoption in place" % _show(inputs.get("cutover_mode")))
    if inputs.get("cutover_weight_cache") and inputs.get("cutover_multinode_group"):
        out.append("cutover_weight_cache with cutover_multinode_group %s: the weight cache runs for a server on one "
                   "host" % _show(inputs.get("cutover_multinode_group")))
    return out


def servers_of(ports):
    """cutover_ports as the playbooks loop over it: one dict an entry ({port} for an int), each with every key of
    SERVER_KEYS it gives, the port as an int; and the problems: an entry that is neither, a bad key, a port that is
    no number, a bad unit name, and two entries with the same port or the same unit name (each naming the entries).
    The port's range is the role's check (input_problems), for every entry."""
    servers, problems = [], []
    for i, entry in enumerate(ports or []):
        where = "cutover_ports[%d]" % i
        if _whole(entry) is not None and not isinstance(entry, dict):
            entry = {"port": entry}
        if not isinstance(entry, dict):
            problems.append("%s %s: an entry is a port or a mapping with port (and optionally %s)"
                            % (where, _show(entry), ", ".join(SERVER_KEYS[1:])))
            continue
        unknown = sorted(k for k in entry if k not in SERVER_KEYS)
        if unknown:
            problems.append("%s has %s: an entry's keys are %s" % (where, ", ".join(map(str, unknown)), ", ".join(SERVER_KEYS)))
        if "port" not in entry:
            problems.append("%s %s has no port" % (where, _show(entry)))
            continue
        if _whole(entry["port"]) is None:  # its range is the role's check of cutover_port, once
            problems.append("%s.port %s: a port is a whole number, 1-65535" % (where, _show(entry["port"])))
            continue
        server = dict((k, entry[k]) for k in SERVER_KEYS if k in entry)
        server["port"] = _whole(entry["port"])
        server["unit_name"] = entry.get("unit_name") or "sglang-%d" % server["port"]  # the role's default
        problem = unit_name_problem(where + ".unit_name", server["unit_name"])
        if problem:
            problems.append(problem)
        servers.append((where, server))
    for key in ("port", "unit_name"):
        seen = {}
        for where, server in servers:
            seen.setdefault(server[key], []).append(where)
        for value, wheres in sorted(seen.items(), key=lambda kv: str(kv[0])):
            if len(wheres) > 1:
                problems.append("%s have the same %s %s: each server has its own port and its own unit"
                                % (", ".join(wheres[:-1]) + " and " + wheres[-1], key, _show(value)))
    return {"servers": [server for where, server in servers], "problems": problems}


def group_input_problems(group, host, groups, batch, entry_points):
    """What is wrong with cutover_multinode_group on this host, before anything is looked at: the inventory group must
    exist, hold this host and at least another, and every host of it must be in this batch of the play (serial must
    not split a server's ranks); a multi-node server is one port (cutover_ports is not for it) and is switched, never
    adopted in place. entry_points: {cutover_mode, cutover_ports} as given."""
    if not group:
        return []
    if not isinstance(group, str):
        return ["cutover_multinode_group %s: the name of an inventory group" % json.dumps(group)]
    out = []
    members = (groups or {}).get(group)
    if members is None:
        return ["cutover_multinode_group %r: no such inventory group (the group of the hosts that run the ranks of "
                "one multi-node server)" % group]
    if host not in members:
        out.append("cutover_multinode_group %r: %s is not in that inventory group" % (group, host))
    if len(members) < 2:
        out.append("cutover_multinode_group %r: the group holds %d host; a multi-node server runs on two or more"
                   % (group, len(members)))
    missing = [h for h in members if h not in (batch or [])]
    if missing:
        out.append("cutover_multinode_group %r: %s not in this run's batch (--limit, cutover_hosts or cutover_serial "
                   "left them out): every rank's host is switched at once" % (group, ", ".join(missing) + (
                       " is" if len(missing) == 1 else " are")))
    if entry_points.get("cutover_mode") not in (None, "switch"):
        out.append("cutover_multinode_group %r with cutover_mode %s: a multi-node server is switched, rank by rank, "
                   "never adopted in place" % (group, entry_points.get("cutover_mode")))
    if entry_points.get("cutover_ports"):
        out.append("cutover_multinode_group %r with cutover_ports: a multi-node server is one port, cutover_port"
                   % group)
    return out


def cutover_inputs(inputs, host=None, groups=None, batch=None):
    """The inputs stage, one mapping: `problems`, each rule the inputs given ({variable: value}) break, those of
    cutover_multinode_group with them (host: this host; groups: the inventory's; batch: ansible_play_batch); and
    cutover_ports as the playbooks loop over it - `servers`, and `server_problems`, what is wrong with its entries (the
    playbooks' check: the role reads cutover_ports only for the group's rule)."""
    inputs = inputs or {}
    servers = servers_of(inputs.get("cutover_ports"))
    problems = input_problems(inputs) + group_input_problems(
        inputs.get("cutover_multinode_group"), host, groups, batch,
        {"cutover_mode": inputs.get("cutover_mode"), "cutover_ports": inputs.get("cutover_ports")})
    return {"problems": problems, "servers": servers["servers"], "server_problems": servers["problems"]}


class FilterModule(object):
    def filters(self):
        return {"cutover_inputs": cutover_inputs}
