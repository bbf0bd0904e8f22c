# -*- coding: utf-8 -*-
# Copyright: inferops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""process_kill: select processes by pid or pattern, and stop them (their tree, in mixed mode the roots first)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.inferops.sglang.plugins.module_utils._base import ProcessBase


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
