# -*- coding: utf-8 -*-
# Copyright: inferops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

# Documented in cutover_plan_lines.yml, cutover_bench_gate.yml, cutover_summary.yml, cutover_progress.yml and
# cutover_prewarm_progress.yml beside this file.

import re

from ansible_collections.inferops.sglang.plugins.module_utils._host.progress import last
from ansible_collections.inferops.sglang.plugins.module_utils._host.redact import MASK, Redactor, is_secret_name
from ansible_collections.inferops.sglang.plugins.module_utils._server.model_files import size

# What SGLang's log says once the model is loaded and the HTTP server warms up, and once it is ready.
_WARMUP = re.compile(r"warm.?up|Uvicorn running|Application startup complete", re.I)
_READY = re.compile(r"fired up and ready", re.I)


def cutover_plan_lines(checks, release_strays=False):
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


def cutover_bench_gate(baseline, service, max_slowdown_pct):
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


def cutover_summary(done, recorded_report=None):
    """The record stage's lines: the plan (when no preflight said it) and the report of the record kept (by the
    record stage, else by the switch's call); else what the mode says (nothing switched, check mode, adopted)."""
    report = recorded_report or done.get("report")
    if report:
        return list(done.get("plan") or []) + report.splitlines()
    return [done["says"]]


# a quoted field of a repr: SGLang logs `server_args=ServerArgs(..., api_key='...', ...)` at start
_QUOTED = re.compile(r"(?<![A-Za-z0-9_])([A-Za-z_][A-Za-z0-9_]*)=(['\"])(.*?)\2")


def mask_log_line(line, secrets=None):
    """A server's log line with its secrets masked: the given values, the values of secret flags and of secret names
    (NAME=value, and a repr's quoted name='value': api_key, admin_api_key, hf_token...), as _host.redact masks them."""
    redact = Redactor(values=[s for s in secrets or [] if s])
    out, at, line = [], 0, line or ""
    for m in _QUOTED.finditer(line):  # a quoted secret whole (spaces and all); the rest as the redactor masks it
        if is_secret_name(m.group(1)):
            out += [redact(line[at:m.start()]), m.group(1) + "=" + m.group(2) + MASK + m.group(2)]
            at = m.end()
    return "".join(out + [redact(line[at:])])


def cutover_progress(outcome, elapsed, log_line="", secrets=None):
    """One progress line of the switch's call while it runs: the phase (stopping: the worker's steps before the
    unit's start; loading, warm-up: the unit's log; verifying: the log says ready), the seconds since the call began,
    and the unit's last log line, the given secrets masked."""
    outcome = outcome or {}
    steps = [s.get("step") for s in outcome.get("steps") or []]
    line = (log_line or "").strip().splitlines()[-1:] or [""]
    line = mask_log_line(line[0], secrets)
    if not outcome.get("started_at"):
        phase = "stopping" + (" (%s done)" % steps[-1] if steps else "")
    elif _READY.search(line):
        phase = "verifying"
    elif _WARMUP.search(line):
        phase = "warm-up"
    else:
        phase = "loading"
    return "%s, %d s%s" % (phase, int(elapsed), (": " + line[:200]) if line and outcome.get("started_at") else "")


def cutover_prewarm_progress(text, elapsed):
    """One progress line of the page-cache warm while it runs, from its progress file's text (the last whole line):
    the seconds since the warm's call began, what was read of what it plans to read."""
    done = last(text)
    try:
        read, planned = int(done.get("read") or 0), int(done.get("planned") or 0)
    except (TypeError, ValueError):
        read = planned = 0
    line = "warming the page cache, %d s" % int(elapsed)
    return line + (": %s of %s read" % (size(read), size(planned)) if planned else ": starting")


class FilterModule(object):
    def filters(self):
        return {"cutover_plan_lines": cutover_plan_lines, "cutover_bench_gate": cutover_bench_gate,
                "cutover_summary": cutover_summary, "cutover_progress": cutover_progress,
                "cutover_prewarm_progress": cutover_prewarm_progress}
