# -*- coding: utf-8 -*-
# Copyright: inferops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

# Documented in cutover_report.yml beside this file: the report stage's filter (cutover_report), what the role says;
# the functions it calls are plain functions, tested each on its own.


def plan_lines(checks, release_strays=False):
    """The plan, as the preflight's checks found it (sglang_switch's result, its own or a separate look's)."""
    preflight = checks.get("preflight") or {}
    units = checks.get("units") or []
    lines = [checks.get("msg"),
             "GPUs of the server: %s" % (preflight.get("gpus"),),
             "protected, never touched: %s" % [p.get("cmdline") for p in preflight.get("protected") or []],
             "strays (released: %s): %s" % (bool(release_strays), [p.get("cmdline") for p in preflight.get("strays") or []]),
             "other units that could serve the port, and what the switch does to each: %s" % ("" if units else "none")]
    lines += [u.get("plan") for u in units]
    for unit in units:
        changed = unit.get("changed")
        if changed is not None:
            lines += ["what changes in it: %s" % c for c in (changed if isinstance(changed, list) else [changed])]
    return lines


def bench_gate(baseline, service, max_slowdown_pct):
    """The throughput gate: per concurrency, the baseline's and the service's output throughput and the change; the
    rows slower than allowed; and the sentence that says so."""
    table = []
    for concurrency, before in baseline.items():
        b, s = before["output_throughput"], service[concurrency]["output_throughput"]
        table.append({"concurrency": int(concurrency), "baseline": round(b, 1), "service": round(s, 1),
                      "change_pct": round((s / b - 1) * 100, 1)})
    slower = [row for row in table if row["change_pct"] < -float(max_slowdown_pct)]
    says = ("the service is slower than the old server at concurrency %s (output tok/s, baseline -> service): %s; "
            "allowed -%s %%" % ([r["concurrency"] for r in slower],
                                "; ".join("C=%d %s -> %s (%s %%)" % (r["concurrency"], r["baseline"], r["service"],
                                                                     r["change_pct"]) for r in table),
                                max_slowdown_pct))
    return {"table": table, "slower": slower, "says": says}


def summary(done, recorded_report=None):
    """The record stage's lines: the plan (when no preflight said it) and the report of the record kept (by the
    record stage, else by the switch's call); else what the mode says (nothing switched, check mode, adopted)."""
    report = recorded_report or done.get("report")
    if report:
        return list(done.get("plan") or []) + report.splitlines()
    return [done["says"]]


def cutover_report(given, release_strays=False, max_slowdown_pct=0):
    """The report stage, what the role says, one mapping with the keys of what is given ({part: value}):
    checks (sglang_switch's result, its own or a separate look's): `plan`, its lines (release_strays: whether the
    strays are released);
    baseline and service (each bench_result): `gate`, the throughput gate (max_slowdown_pct: the slowdown allowed);
    done (what the mode's tasks left the record stage) and recorded (the report of the record the record stage kept,
    or None): `summary`, the lines the role says last."""
    given = given or {}
    out = {}
    if "checks" in given:
        out["plan"] = plan_lines(given["checks"], release_strays)
    if "baseline" in given or "service" in given:
        out["gate"] = bench_gate(given.get("baseline") or {}, given.get("service") or {}, max_slowdown_pct)
    if "done" in given:
        out["summary"] = summary(given["done"], given.get("recorded"))
    return out


class FilterModule(object):
    def filters(self):
        return {"cutover_report": cutover_report}
