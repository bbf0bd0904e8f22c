# -*- coding: utf-8 -*-
# Copyright: inferops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""process_kill, process_count and gpu_release: select processes, stop them, count them."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import time

from ansible_collections.inferops.sglang.plugins.module_utils import _nvidia, _procfs, _signals
from ansible_collections.inferops.sglang.plugins.module_utils._base import Base
from ansible_collections.inferops.sglang.plugins.module_utils._selection import Selector, SelectionError
from ansible_collections.inferops.sglang.plugins.module_utils._specs import REDACT_SPEC


SELECTION_SPEC = dict(
    pid=dict(type="list", elements="raw"),
    pattern=dict(type="str"),
    user=dict(type="str"),
    exclude=dict(type="list", elements="str", default=[]),
    max_targets=dict(type="int", default=64),
    protect=dict(type="list", elements="str", default=[]),
    unprotect=dict(type="list", elements="str", default=[]),
)

SELECTION_SPEC.update(REDACT_SPEC)
STOP_SPEC = dict(
    signal=dict(type="str", default="TERM"),
    escalate=dict(type="str", default="KILL"),
    grace=dict(type="float", default=30.0),
)


class ProcessBase(Base):
    """Selecting and stopping processes, shared by the three modules."""

    def selector(self, required=True):
        p = self.params
        try:
            return Selector(pid=p.get("pid"), pattern=p.get("pattern"), user=p.get("user"), exclude=p.get("exclude"),
                            max_targets=p.get("max_targets"), protect=p.get("protect"), unprotect=p.get("unprotect"),
                            required=required, redact=self.redact)
        except SelectionError as e:
            self.fail(str(e))

    def select(self, selector, **kw):
        try:
            return selector.select(**kw)
        except SelectionError as e:
            self.fail(str(e))

    def signals(self):
        try:
            return _signals.signum(self.params["signal"]), _signals.signum(self.params["escalate"])
        except ValueError as e:
            self.fail("%s: use a name such as TERM, INT, KILL or a number" % e)

    def describe(self, sel):
        return dict(
            refused=[dict(p.as_dict(self.redact), reason=why) for p, why in sel.refused],
            zombies=[p.as_dict(self.redact) for p in sel.zombies],
            missing=sel.missing,
        )

    def stop_targets(self, targets, roots, mode):
        """Signal targets; returns (per-target dicts, stop result)."""
        sig, esc = self.signals()
        if self.params["grace"] < 0:
            self.fail("grace must be >= 0 seconds")
        res = _signals.stop(targets, roots=roots, sig=sig, escalate=esc, grace=self.params["grace"], mode=mode)
        rows = []
        for p in targets:
            d = p.as_dict(self.redact)
            d.update(signals=res.sent.get(p.pid, []), ended_by=res.ended_by.get(p.pid, "still running"))
            rows.append(d)
        return rows, res

    def stop_failure(self, res, targets):
        by_pid = dict((p.pid, p) for p in targets)
        left = ["%d (%s%s)" % (pid, self.redact(by_pid[pid].cmdline)[:100],
                               ", stuck in uninterruptible sleep (D): waiting on the kernel, often a driver"
                               if pid in res.stuck else "") for pid in res.remaining]
        return "%d process(es) still alive after %s: %s" % (len(left), self.params["escalate"], "; ".join(left))


class ProcessKill(ProcessBase):
    def run(self):
        p = self.params
        sel = self.select(self.selector(), tree=p["tree"])
        self.signals()
        result = dict(changed=False, targets=[p_.as_dict(self.redact) for p_ in sel.targets], escalated=False,
                      remaining=[], stuck=[], **self.describe(sel))
        if self.module._diff:
            result["diff"] = dict(before="".join("%d %s\n" % (t.pid, self.redact(t.cmdline)) for t in sel.targets),
                                  after="")
        if not sel.targets:
            result.update(msg="no process to stop", elapsed=self.elapsed())
            self.module.exit_json(**result)
        if self.module.check_mode:
            result.update(changed=True, elapsed=self.elapsed(),
                          msg="would send %s to %d process(es)" % (p["signal"], len(sel.roots() if p["mode"] == "mixed" else sel.targets)))
            self.module.exit_json(**result)
        rows, res = self.stop_targets(sel.targets, sel.roots(), p["mode"])
        result.update(changed=True, targets=rows, escalated=res.escalated, remaining=res.remaining, stuck=res.stuck,
                      elapsed=self.elapsed(), timings=res.timings)
        if res.remaining:
            self.fail(self.stop_failure(res, sel.targets), **result)
        result["msg"] = "stopped %d process(es)%s" % (len(rows), ", escalated to %s" % p["escalate"] if res.escalated else "")
        self.module.exit_json(**result)


class ProcessCount(ProcessBase):
    def run(self):
        p = self.params
        selector = self.selector()
        expect, timeout = p["expect"], p["timeout"]
        if expect is not None and expect < 0:
            self.fail("expect must be >= 0")
        sel = self.select(selector)
        while expect is not None and len(sel.targets) != expect and not self.module.check_mode:
            if time.monotonic() - self.t0 >= timeout:
                result = self.result(sel)
                self.fail("expected %d matching process(es), found %d after %.1f s: %s" % (
                    expect, len(sel.targets), timeout,
                    "; ".join("%d %s" % (t.pid, self.redact(t.cmdline)[:100]) for t in sel.targets)), **result)
            time.sleep(0.05)
            sel = self.select(selector)
        self.module.exit_json(**self.result(sel))

    def result(self, sel):
        return dict(changed=False, count=len(sel.targets), pids=[t.pid for t in sel.targets],
                    processes=[t.as_dict(self.redact) for t in sel.targets], elapsed=self.elapsed(), **self.describe(sel))


class GpuRelease(ProcessBase):
    def run(self):
        p = self.params
        selector = self.selector(required=False)
        gpus = p["gpus"]
        if gpus is not None and any(g < 0 for g in gpus):
            self.fail("gpus are indices: 0, 1, ...")
        try:
            plan = _nvidia.plan(_procfs.snapshot(), selector, p["devices"], gpus)
        except SelectionError as e:
            self.fail(str(e))
        targets = plan.targets
        holders = plan.holders
        protected = [dict(h.as_dict(self.redact), reason=why) for h, why in plan.protected]
        other = [dict(h.as_dict(self.redact), reason=why) for h, why in plan.skipped]
        shared_only = [h.as_dict(self.redact) for h in plan.shared_only]
        smi = _nvidia.Smi(self.module.run_command)
        result = dict(changed=False, holders=[h.as_dict(self.redact) for h in holders],
                      targets=[h.as_dict(self.redact) for h in targets], protected=protected,
                      shared_only=shared_only, skipped=other, nvidia_smi=smi.available)
        if not smi.available:
            result["nvidia_smi_note"] = "nvidia-smi not found: memory is not read; the device-file scan alone decides"
        before = self.reading(smi, result, "before")
        if self.module._diff:
            result["diff"] = dict(before="".join("%d %s %s\n" % (h.proc.pid, ",".join(h.files), self.redact(h.proc.cmdline))
                                                 for h in targets), after="")
        if p["state"] == "query" or not targets:
            result.update(elapsed=self.elapsed(), msg="%d holder(s), %d target(s)" % (len(holders), len(targets)))
            self.module.exit_json(**result)
        if self.module.check_mode:
            result.update(changed=True, elapsed=self.elapsed(), msg="would release %d process(es)" % len(targets))
            self.module.exit_json(**result)
        rows, res = self.stop_targets([h.proc for h in targets], None, "all")
        result.update(changed=True, released=rows, escalated=res.escalated, remaining=res.remaining, stuck=res.stuck)
        if res.remaining:
            self.fail(self.stop_failure(res, [h.proc for h in targets]), **result)
        if before is not None:
            try:
                back = _nvidia.memory_back(smi, before, [h.proc.pid for h in targets], p["timeout"])
            except Exception as e:  # pylint: disable=broad-except
                self.fail("reading nvidia-smi failed: %s" % e, **result)
            result.update(after=back["after"], memory=dict((k, back[k]) for k in ("waited", "unlisted", "readings", "gpus")))
            if not back["complete"]:
                self.fail("GPU memory of released processes is not back after %g s: %s" % (
                    p["timeout"], _memory_left(back)), **result)
            result["memory_released_after"] = round(time.monotonic() - self.t0, 3)
        result.update(elapsed=self.elapsed(), msg="released %d process(es)" % len(rows))
        self.module.exit_json(**result)

    def reading(self, smi, result, key):
        if not smi.available:
            return None
        try:
            r = smi.reading()
        except Exception as e:  # pylint: disable=broad-except
            self.fail("reading nvidia-smi failed: %s" % e, **result)
        result[key] = r
        return r


def _memory_left(back):
    if back["listed"]:
        return "nvidia-smi still lists pids %s" % back["listed"]
    return ", ".join("GPU %d dropped %d of the %d MiB they held" % (r["index"], r["dropped_mib"], r["held_mib"])
                     for r in back["gpus"])
