# -*- coding: utf-8 -*-
# Copyright: inferops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What the modules' managers share: their parameters, failing, writing files, timing (Base, every one); selecting
and stopping processes (ProcessBase, those of process_kill, process_count and gpu_release)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import time

from ansible_collections.inferops.sglang.plugins.module_utils._host import signals as _signals
from ansible_collections.inferops.sglang.plugins.module_utils._host.redact import Redactor
from ansible_collections.inferops.sglang.plugins.module_utils._host.selection import Selector, SelectionError
from ansible_collections.inferops.sglang.plugins.module_utils._specs import check_port, check_unit_name


class Base:
    def __init__(self, module):
        self.module = module
        self.params = module.params
        self.redact = Redactor(flags=self.params.get("redact") or ())
        self.t0 = time.monotonic()

    def port_and_unit(self):
        """(port, unit name) of a module that switches or adopts the server on a port (sglang_switch, sglang_adopt),
        with its drain: the module fails on a bad one, before anything is looked at."""
        p = self.params
        port, name = check_port(p["port"], self.fail), check_unit_name(p["unit"], "unit", self.fail)
        if p["drain"] < 0:
            self.fail("drain must be >= 0 seconds")
        return port, name

    def fail(self, msg, **result):
        self.module.fail_json(msg=msg, **result)

    def failed(self, msg, result, **extra):
        """Fail with msg and what result holds so far (a msg of its own is replaced)."""
        out = dict(result, **extra)
        out.pop("msg", None)
        self.fail(msg, **out)

    def write_files(self, files, **result):
        """Write each _files.File that differs (nothing in check mode); a failed write fails the module."""
        for f in files:
            if f.differs and not self.module.check_mode:
                try:
                    f.write()
                except OSError as e:
                    self.failed("could not write %s: %s" % (f.path, e), result)

    def elapsed(self):
        return round(time.monotonic() - self.t0, 3)


class ProcessBase(Base):
    """Selecting and stopping processes: the managers of process_kill, process_count and gpu_release."""

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
