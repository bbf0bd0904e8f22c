# -*- coding: utf-8 -*-
# Copyright: inferops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The record of a cutover or a rollback in the port's state folder: last.json, last.md (the same for people), and
each run's own in history/, named after its time, the last HISTORY_KEEP (or as many as asked) kept; and the port's
figures for node_exporter's textfile collector made from it (metrics, textfile). Keep is the one writer of them all:
sglang_switch keeps the record through it once the service serves (or a later run, when the switch's own run was
interrupted), cutover_record when the controller adds to it, and the textfile."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import re
import time

from ansible_collections.inferops.sglang.plugins.module_utils import _state_dir
from ansible_collections.inferops.sglang.plugins.module_utils._host import owner as _owner
from ansible_collections.inferops.sglang.plugins.module_utils._host.files import File
from ansible_collections.inferops.sglang.plugins.module_utils._switch.states import KINDS, Actions, Kinds

HISTORY_KEEP = 20  # records kept in history/, the newest
_STAMP = r"\d{8}T\d{6}Z"
_KEPT = re.compile(r"^(%s)-(%s)\.json$" % (_STAMP, "|".join(KINDS)))
_EARLIER = re.compile(r"^(%s)-(%s)\.json$" % ("|".join(KINDS), _STAMP))  # 0.2.0's, beside last.json


def began(record):
    """The record's time (seconds since the epoch); ValueError when it has none."""
    try:
        return float(record.get("time"))
    except (TypeError, ValueError):
        raise ValueError("the record needs its time (seconds since the epoch), not %r" % (record.get("time"),))


def files(folder, kind, record):
    """The record's files (_files.File: 0640 root, the folder 0700), for kind cutover, rollback or adopt
    (states.KINDS)."""
    if not os.path.isabs(folder):
        raise ValueError("the record's folder must be an absolute path, not %r" % folder)
    data = json.dumps(record, indent=4, sort_keys=True) + "\n"
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(began(record)))
    texts = [data, data, report(record)]  # last.json, the run's own, last.md
    return [File(path, text, 0o640, 0, 0, dir_mode=0o700)
            for path, text in zip(_state_dir.records(folder, kind, stamp), texts)]


def _history(folder, keep, new=()):
    """The history as it stands (the names in history/, an earlier release's KIND-STAMP.json beside last.json under the
    name it gets there, and the new ones), each name with the path it has now, and the names beyond the newest keep."""
    if isinstance(keep, bool) or not isinstance(keep, int) or keep < 1:
        raise ValueError("the history keeps at least 1 record, not %r" % (keep,))
    kept = _state_dir.history(folder)
    names = dict((name, os.path.join(kept, name)) for name in _listdir(kept) if _KEPT.match(name))
    for name in _listdir(folder):
        earlier = _EARLIER.match(name)
        if earlier:
            names["%s-%s.json" % (earlier.group(2), earlier.group(1))] = os.path.join(folder, name)
    names.update((os.path.basename(path), path) for path in new)
    runs = sorted(names)
    return names, runs[:max(0, len(runs) - keep)]


def _listdir(folder):
    try:
        return os.listdir(folder)
    except OSError:
        return []


def cut(folder, keep, files):
    """The records the history would no longer keep once files (files()'s) are written: what check mode reports."""
    stale = _history(folder, keep, [f.path for f in files if os.path.dirname(f.path) == _state_dir.history(folder)])[1]
    return [os.path.join(_state_dir.history(folder), name) for name in stale]


def tidy(folder, keep):
    """Once a record was written: the history cut to its newest `keep` records, an earlier release's records moved
    into history/ first. Only in folders of the writer's own. Returns the paths removed."""
    kept = _state_dir.history(folder)
    if not os.path.isdir(kept) or os.lstat(folder).st_uid != os.geteuid() or os.lstat(kept).st_uid != os.geteuid():
        return []
    names, stale = _history(folder, keep)
    for name, path in names.items():
        if os.path.dirname(path) != kept:
            os.rename(path, os.path.join(kept, name))
    removed = [os.path.join(kept, name) for name in stale]
    for path in removed:
        os.unlink(path)
    return removed


class WriteError(Exception):
    """A file of the record that could not be written: the path and why."""


class Keep:
    """Keeping the record of a run and the port's textfile, the one way either is written: a record (None: the switch
    kept it already) written to folder (files()), and with metrics_dir its figures (from the record given, else from
    last.json as the host holds it; restarts: sglang_discover's) for node_exporter's textfile collector (textfile()).
    Everything is checked when made, before anything is written: ValueError naming the rule and the value."""

    def __init__(self, folder, kind, record, history=HISTORY_KEEP, metrics_dir=None, restarts=None):
        if isinstance(history, bool) or not isinstance(history, int) or history < 1:
            raise ValueError("the history keeps at least 1 record, not %r" % (history,))
        if not isinstance(folder, str) or not os.path.isabs(folder):
            raise ValueError("the record's folder must be an absolute path, not %r" % (folder,))
        self.folder, self.history = folder, history
        self.record = files(folder, kind, record) if record is not None else []
        self.removed = cut(folder, history, self.record) if self.record else []
        self.metrics = []
        if metrics_dir:
            last = record if record is not None else _last(folder)
            if last is not None:  # no record yet (nothing was cut over; check mode before the first run): no file
                self.metrics = [textfile(metrics_dir, last, restarts)]
        self.files = self.record + self.metrics
        self.written = [f.path for f in self.files if f.differs]
        self.warning = None

    def write(self):
        """Each file that differs written (WriteError: the one that could not be, and why); then the history cut to
        its newest records (one that could not be: self.warning; the record is kept). Returns the paths removed."""
        for f in self.files:
            if f.differs:
                try:
                    f.write()
                except OSError as e:
                    raise WriteError("could not write %s: %s" % (f.path, e))
        if self.record:
            try:
                self.removed = tidy(self.folder, self.history)
            except OSError as e:
                self.removed, self.warning = [], "the record is written, but its history could not be cut to %d: %s" % (
                    self.history, e)
        return self.removed


def _last(folder):
    """The record last.json holds (a regular file, never read through a link), or None when there is none."""
    path = _state_dir.last(folder)
    if not os.path.lexists(path):
        return None
    text, why = _owner.read_text(path)
    if text is None:
        raise ValueError("the record the figures are made from cannot be read: %s" % why)
    try:
        return json.loads(text)
    except ValueError as e:
        raise ValueError("the record the figures are made from, %s, is not JSON: %s" % (path, e))


# The kind of run a record is of (its action) -> the mode label: how the port's server came to run as it does.
MODES = {Actions.SWITCH: Actions.SWITCH, Actions.RESTART: Actions.SWITCH, Kinds.ADOPT: Kinds.ADOPT,
         Actions.ROLLBACK: Actions.ROLLBACK}
RESULTS = ("success", "rolled_back")
HELP = (
    ("info", "The server on the port as the last cutover, adoption or rollback left it (always 1)."),
    ("last_cutover_timestamp_seconds", "When the last cutover, adoption or rollback of the port began."),
    ("last_downtime_seconds", "How long the port did not serve in the last switch: stop to ready."),
    ("last_load_seconds", "How long the server took to load the model in the last switch (part of the downtime)."),
    ("last_result", "What the last run left serving the port: success (the service) or rolled_back."),
)
TEXTFILE = "inferops_sglang_%d.prom"  # the port's file in the textfile collector's folder


def _escape(value):
    """A label value in the text format (none: empty), its backslashes, double quotes and newlines escaped."""
    text = "%s" % value if value is not None else ""
    return text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _labels(pairs):
    return "{%s}" % ",".join('%s="%s"' % (k, _escape(v)) for k, v in pairs)


def _number(record, key):
    value = record.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError("the record's %s must be a number of seconds, not %r" % (key, value))
    return float(value)


def _figures(record, action):
    """downtime and load (None: not measured) of the record's run."""
    if action == Kinds.ADOPT:  # in place: nothing stopped, nothing loaded
        return 0.0, None
    if action == Actions.ROLLBACK:
        back, ready = _number(record, "rollback_downtime_sec"), _number(record, "ready_after_sec")
        return (round(back + (ready or 0.0), 3) if back is not None else None), ready
    return _number(record, "downtime_until_ready_sec"), _number(record, "load_sec")


def _port(record):
    """The record's port (1-65535); ValueError otherwise."""
    port = record.get("port")
    if isinstance(port, bool) or not str(port).isdigit() or not 0 < int(port) < 65536:
        raise ValueError("the record's port must be 1-65535, not %r" % (port,))
    return int(port)


def metrics(record, restarts=None):
    """The port's figures in Prometheus's text format (version 0.0.4), for node_exporter's textfile collector, from
    its record (last.json): one line per figure, labelled with the port; with restarts (sglang_discover's: the unit's
    restarts by systemd, by reason, as its journal keeps them), inferops_sglang_restarts_total per reason. The same
    text for the same record. ValueError for a record or restarts that are not such."""
    if not isinstance(record, dict):
        raise ValueError("the record must be a dict (the last record), not %r" % (record,))
    action = record.get("action")
    if action not in MODES:
        raise ValueError("the record's action must be one of %s, not %r" % (", ".join(sorted(MODES)), action))
    port = _port(record)
    began_at = _number(record, "time")
    if began_at is None:
        raise ValueError("the record needs its time (seconds since the epoch), not %r" % (record.get("time"),))
    downtime, load = _figures(record, action)
    result = RESULTS[1] if action == Actions.ROLLBACK else RESULTS[0]
    info = [("port", port), ("unit", record.get("unit")), ("version", record.get("sglang_version")),
            ("model", record.get("model")), ("mode", MODES[action])]
    series = {
        "info": [(info, 1)],
        "last_cutover_timestamp_seconds": [([("port", port)], began_at)],
        "last_downtime_seconds": [([("port", port)], downtime)] if downtime is not None else [],
        "last_load_seconds": [([("port", port)], load)] if load is not None else [],
        "last_result": [([("port", port), ("result", r)], int(r == result)) for r in RESULTS],
    }
    lines = []
    for name, text in HELP:
        metric = "inferops_sglang_" + name
        lines += ["# HELP %s %s" % (metric, text), "# TYPE %s gauge" % metric]
        lines += ["%s%s %r" % (metric, _labels(labels), value) for labels, value in series[name]]
    if restarts is not None:
        reasons = restarts.get("reasons") if isinstance(restarts, dict) else None
        if not isinstance(reasons, dict) or any(isinstance(n, bool) or not isinstance(n, int) or n < 0
                                                for n in reasons.values()):
            raise ValueError("restarts must be sglang_discover's (reasons: {result: count}), not %r" % (restarts,))
        metric = "inferops_sglang_restarts_total"
        lines += ["# HELP %s Restarts of the port's unit by systemd, by the unit's result before each (watchdog: the "
                  "liveness checker found it hung), as its journal keeps them." % metric, "# TYPE %s counter" % metric]
        lines += ["%s%s %d" % (metric, _labels([("port", port), ("reason", r)]), n) for r, n in sorted(reasons.items())]
    return "\n".join(lines) + "\n"


def textfile(folder, record, restarts=None):
    """The port's file in node_exporter's textfile collector folder (_files.File: <folder>/inferops_sglang_<port>.prom,
    root's, 0644; written atomically). Root writes there only when no other user can change what the folder is:
    it and every folder above it (and any link's target) root's and writable by root alone (_owner.distrust), the
    folder there already. ValueError naming the rule and the folder otherwise."""
    if not isinstance(folder, str) or not re.match(r"^(/[^/]+)+/?$", folder) or re.search(r"/\.\.?(/|$)", folder):
        raise ValueError("cutover_metrics_dir must be an absolute path without . or .. parts, not %s; no metrics were "
                         "written." % json.dumps(folder))
    folder = folder.rstrip("/")
    why = _owner.distrust(folder)
    if why is None and not os.path.isdir(folder):
        why = "it is not a folder"
    if why:
        raise ValueError("cutover_metrics_dir %s: %s: the folder and every folder above it (and any link's target) "
                         "must be root's and writable by root alone; no metrics were written. Create it so (install -d "
                         "-o root -g root -m 0755 %s), or point node_exporter's textfile collector at such a folder."
                         % (folder, why, folder))
    text = metrics(record, restarts)
    return File(os.path.join(folder, TEXTFILE % _port(record)), text, 0o644, 0, 0)


UNIT_KEYS = ("unit", "action", "files", "backups", "before", "serves", "changed")


def switch_plan(given, port_dir, insp, version, installed, units=()):
    """What the record of a switch takes from the run that starts it (given: the module's record option, port_dir:
    the port's state folder, where its files go unless given says not to write them, insp: the preflight's,
    installed: the unit's install, units: the units that could serve the port it took over), kept with the switch's
    plan: whichever run finds the switch finished first keeps the record from it (that run, one that joined it, or
    a rerun after an interruption). None when no record is asked for."""
    if not given:
        return None
    rec = dict(dir=port_dir if given["write"] else None, history=given.get("history") or HISTORY_KEEP,
               data=given["data"], family=[x["pid"] for x in insp["family"]],
               gpus=insp.get("gpus"), sglang_version=version, installed=None,
               units=[dict((k, u.get(k)) for k in UNIT_KEYS) for u in units])
    if installed:
        rec["installed"] = dict((k, installed[k]) for k in ("seconds", "unit_path", "checksum", "environment_names"))
    return rec


def switch_record(given, outcome, result, back, load=None):
    """The record of a switch (back: a rollback): what its run gave (given: switch_plan's), completed with what the
    switch (outcome) and the wait after it (the module's result) found; load: the load time where no wait saw it."""
    rec = dict(given["data"], time=outcome.get("began"))
    if back:
        rec.update(action=Actions.ROLLBACK, rollback_steps=result.get("steps"), rollback_downtime_sec=result.get("downtime"),
                   pid_started=result.get("pid_started"), ready_after_sec=result.get("ready_after"),
                   units_restored=outcome.get("units_restored"), unit_started=outcome.get("unit_started"),
                   previous_unit=outcome.get("previous_unit", False))
        return rec
    # a group's rank started in a switch of its own, after its stop: what it stopped comes with its data
    old = dict(rec.get("old") or {}, family=given["family"] or (rec.get("old") or {}).get("family") or [])
    downtime, load = result.get("downtime"), result.get("ready_after", load)
    began = (rec.get("group") or {}).get("stop_began_at")
    if downtime is None and began and outcome.get("started_at"):  # a group's rank: its downtime began at rank 0's stop
        downtime = round(outcome["started_at"] - began, 3)
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
               model=result.get("model"), generated=bool(result.get("generated_tokens")),
               sglang_version=given.get("sglang_version"), gpus=given.get("gpus") or rec.get("gpus"), stages_sec=stages,
               units=given.get("units") or [], weight_cache=result.get("weight_cache"))
    return rec


def _steps(steps):
    return ", ".join("%s %s s%s" % (s.get("step"), s.get("seconds"), " (%s)" % s["escalation"] if s.get("escalation")
                                    else "") for s in steps or []) or "none"


def _stages(stages):
    order = ("discover", "adopt", "prepare", "unit", "switch", "verify")
    ordered = sorted((stages or {}).items(), key=lambda kv: order.index(kv[0]) if kv[0] in order else len(order))
    return ", ".join("%s %s s" % kv for kv in ordered) or "none"


def _none(value, text="none"):
    return value if value not in (None, "", [], {}) else text


def report(r):
    """The record as markdown."""
    when = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(began(r)))
    if r.get("action") == Actions.ROLLBACK:
        return "\n".join([
            "# Rollback of port %s on %s" % (r.get("port"), r.get("host")),
            "",
            "- when: %s" % when,
            "- why: %s" % r.get("failure"),
            ("- %s serves again as it did before the failed restart (its unit's files put back): ready after %s s" % (
                r["unit_started"], r.get("ready_after_sec")) if r.get("previous_unit") else
             "- %s, which ran the server before, serves again: ready after %s s; %s is disabled" % (
                r["unit_started"], r.get("ready_after_sec"), r.get("unit")) if r.get("unit_started") else
             "- the captured command (%s) serves again: pid %s, ready after %s s; %s is disabled"
             % (r.get("capture"), r.get("pid_started"), r.get("ready_after_sec"), r.get("unit"))),
            "- units put back as they were: %s" % _none(", ".join(r.get("units_restored") or [])),
            "- downtime of the step back: %s s; steps: %s" % (r.get("rollback_downtime_sec"), _steps(r.get("rollback_steps"))),
        ]) + "\n"
    old = r.get("old") or {}
    if r.get("action") == Kinds.ADOPT:
        return _adopted(r, when, old)
    lines = [
        "# Cutover of port %s on %s" % (r.get("port"), r.get("host")),
        "",
        "- when: %s" % when,
        "- action: %s; %s serves %s (sglang %s)" % (
            r.get("action"), r.get("unit"), r.get("model") or "the model", r.get("sglang_version")),
        "- old server: pid %s, %d processes: `%s`" % (old.get("pid"), len(old.get("family") or []), old.get("command")),
        "- downtime: %s s switch + %s s load = %s s until ready" % (
            r.get("downtime_switch_sec"), r.get("load_sec"), r.get("downtime_until_ready_sec"))
        if r.get("load_sec") is not None else
        "- downtime: %s s until its unit started (its load not waited for here: rank 0's record has the server's)"
        % r.get("downtime_switch_sec"),
    ] + _group(r.get("group")) + [
        "- %s" % (r.get("model_cache") or {}).get("summary", "model: not measured"),
    ] + _weights(r.get("weight_cache")) + [
        "- stages: %s" % _stages(r.get("stages_sec")),
        "- switch steps: %s" % _steps(r.get("steps")),
        "",
        "- unit: %s (sha1 %s); environment: %s" % (r.get("unit_path"), r.get("unit_checksum"),
                                                   ", ".join(r.get("environment_names") or [])),
        "- patches: %s; NCCL: %s" % (_none(r.get("patches")), _none(", ".join(r.get("nccl") or []))),
        "- boot launchers: %s (%s)" % (_none(", ".join(sorted(set(b.get("path", "") for b in old.get("boot_launchers") or [])))),
                                       r.get("boot_launchers_handling")),
    ]
    if r.get("bench"):
        lines.append("- throughput (output tok/s, SGLang's bench_serving): %s" % ", ".join(
            "C=%s %s -> %s (%s %%)" % (b.get("concurrency"), b.get("baseline"), b.get("service"), b.get("change_pct"))
            for b in r["bench"]))
    lines.append("- units that could serve the port, taken over: %s" % _none(", ".join(
        "%s (%s; backed up)" % (u.get("unit"), u.get("action")) for u in r.get("units") or [])))
    for u in r.get("units") or []:
        lines += ["  - %s: %s" % (u.get("unit"), line) for line in u.get("changed") or []]
    lines.append("- what changed from the running command:")
    lines += ["  - %s" % line for line in r.get("changes") or []]
    return "\n".join(lines) + "\n"


def _weights(w):
    """The weight cache's line (_server/weight_cache.reading): how this start had its weights, against the first load."""
    if not w:
        return []
    loads = w.get("load_seconds") or []
    return ["- weight cache: %s (pid %s, %s restarts, %s MiB on the GPUs); this start %s, SGLang's weight load %s s "
            "(the first in the unit's journal: %s s)" % (
                w.get("unit"), w.get("main_pid"), w.get("restarts"), _none(w.get("gpu_memory_mib"), "?"),
                "mapped its weights from it" if w.get("mapped") else "did not map its weights from it",
                loads[-1] if loads else "?", _none(w.get("first_load_seconds"), "?"))]


def _group(g):
    """A multi-node server's lines: the group, this host's rank, every rank's host and stop."""
    if not g:
        return []
    return ["- group: %s, rank %s of %s (rank 0 on %s); the downtime counts from rank 0's stop" % (
        g.get("name"), g.get("rank"), g.get("nnodes"), g.get("leader"))] + [
        "  - rank %s on %s: %s" % (x.get("rank"), x.get("host"), x.get("stop")) for x in g.get("ranks") or []]


def _adopted(r, when, old):
    """An adoption in place: the server runs on, in its scope; the service waits for its next start."""
    a = r.get("adopted") or {}
    since = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(a["since"])) if a.get("since") else "?"
    return "\n".join([
        "# Adoption in place of port %s on %s" % (r.get("port"), r.get("host")),
        "",
        "- when: %s" % when,
        "- adopted: pid %s, live since %s, %d processes in %s (no restart, no downtime): `%s`" % (
            a.get("pid"), since, len(old.get("family") or []), a.get("scope"), old.get("command")),
        "- `systemctl stop %s` drains it (%s) and ends the whole family; when it ends on its own, %s starts" % (
            a.get("scope"), a.get("watcher"), r.get("unit")),
        "- %s: enabled for its next start (the next boot, or a switch run), not started: %s (sha1 %s)" % (
            r.get("unit"), r.get("unit_path"), r.get("unit_checksum")),
        "- log: still %s until the service starts (then the journal)" % (a.get("log") or "where it went"),
        "- steps: %s" % _steps(r.get("steps")),
        "- boot launchers: %s (%s)" % (_none(", ".join(sorted(set(b.get("path", "") for b in old.get("boot_launchers") or [])))),
                                       r.get("boot_launchers_handling")),
    ]) + "\n"
