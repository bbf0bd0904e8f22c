# -*- coding: utf-8 -*-
# Copyright: inferops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""process_count: count the processes a pid or pattern selects, waiting for an expected count."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import time

from ansible_collections.inferops.sglang.plugins.module_utils._base import ProcessBase


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
