# -*- coding: utf-8 -*-
# Copyright: inferops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""gpu_release: the processes holding the GPUs' device files, released (stopped) until nvidia-smi shows their
memory back."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import time

from ansible_collections.inferops.sglang.plugins.module_utils._base import ProcessBase
from ansible_collections.inferops.sglang.plugins.module_utils._host import nvidia as _nvidia, procfs as _procfs
from ansible_collections.inferops.sglang.plugins.module_utils._host.selection import SelectionError


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
