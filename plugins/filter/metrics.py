# -*- coding: utf-8 -*-
# Copyright: inferops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

# Documented in cutover_metrics.yml beside this file.

from ansible.errors import AnsibleFilterError

# The kind of run a record is of (its action) -> the mode label: how the port's server came to run as it does.
MODES = {"switch": "switch", "restart": "switch", "adopt": "adopt", "rollback": "rollback"}
RESULTS = ("success", "rolled_back")
HELP = (
    ("info", "The server on the port as the last cutover, adoption or rollback left it (always 1)."),
    ("last_cutover_timestamp_seconds", "When the last cutover, adoption or rollback of the port began."),
    ("last_downtime_seconds", "How long the port did not serve in the last switch: stop to ready."),
    ("last_load_seconds", "How long the server took to load the model in the last switch (part of the downtime)."),
    ("last_result", "What the last run left serving the port: success (the service) or rolled_back."),
)


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
        raise AnsibleFilterError("cutover_metrics: the record's %s must be a number of seconds, not %r" % (key, value))
    return float(value)


def _figures(record, action):
    """downtime and load (None: not measured) of the record's run."""
    if action == "adopt":  # in place: nothing stopped, nothing loaded
        return 0.0, None
    if action == "rollback":
        back, ready = _number(record, "rollback_downtime_sec"), _number(record, "ready_after_sec")
        return (round(back + (ready or 0.0), 3) if back is not None else None), ready
    return _number(record, "downtime_until_ready_sec"), _number(record, "load_sec")


def cutover_metrics(record, restarts=None):
    """The node_exporter textfile collector's file of a port (Prometheus text format, version 0.0.4) from the
    port's record (last.json): one line per figure, labelled with the port; with restarts (sglang_discover's: the
    unit's restarts by systemd, by reason, as its journal keeps them), inferops_sglang_restarts_total per reason."""
    if not isinstance(record, dict):
        raise AnsibleFilterError("cutover_metrics: the record must be a dict (last.json), not %r" % (record,))
    action = record.get("action")
    if action not in MODES:
        raise AnsibleFilterError("cutover_metrics: the record's action must be one of %s, not %r"
                                 % (", ".join(sorted(MODES)), action))
    port = record.get("port")
    if isinstance(port, bool) or not str(port).isdigit() or not 0 < int(port) < 65536:
        raise AnsibleFilterError("cutover_metrics: the record's port must be 1-65535, not %r" % (port,))
    began = _number(record, "time")
    if began is None:
        raise AnsibleFilterError("cutover_metrics: the record needs its time (seconds since the epoch)")
    port = int(port)
    downtime, load = _figures(record, action)
    result = "rolled_back" if action == "rollback" else "success"
    info = [("port", port), ("unit", record.get("unit")), ("version", record.get("sglang_version")),
            ("model", record.get("model")), ("mode", MODES[action])]
    series = {
        "info": [(info, 1)],
        "last_cutover_timestamp_seconds": [([("port", port)], began)],
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
            raise AnsibleFilterError("cutover_metrics: restarts must be sglang_discover's (reasons: {result: count}), "
                                     "not %r" % (restarts,))
        metric = "inferops_sglang_restarts_total"
        lines += ["# HELP %s Restarts of the port's unit by systemd, by the unit's result before each (watchdog: the "
                  "liveness checker found it hung), as its journal keeps them." % metric, "# TYPE %s counter" % metric]
        lines += ["%s%s %d" % (metric, _labels([("port", port), ("reason", r)]), n) for r, n in sorted(reasons.items())]
    return "\n".join(lines) + "\n"


class FilterModule(object):
    def filters(self):
        return {"cutover_metrics": cutover_metrics}
