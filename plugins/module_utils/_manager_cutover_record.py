# -*- coding: utf-8 -*-
# Copyright: inferops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""cutover_record: the record of a cutover or a rollback in the port's state folder, and the port's figures for
node_exporter's textfile collector (both through _switch/record.py's Keep, the one writer of them)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.inferops.sglang.plugins.module_utils._switch import record as _record
from ansible_collections.inferops.sglang.plugins.module_utils._base import Base

HISTORY_KEEP = _record.HISTORY_KEEP  # cutover_record's default


class CutoverRecord(Base):
    """The record (when given) in the port's state folder: last.json (and last.md), plus each run's own in history/,
    named after its time, the newest `history` kept; with metrics_dir, the port's textfile from that record (or from
    last.json as it is)."""

    def run(self):
        p = self.params
        try:
            keep = _record.Keep(p["dir"], p["kind"], p["record"], p["history"], p["metrics_dir"], p["restarts"])
        except ValueError as e:
            self.fail(str(e))
        result = dict(files=[f.path for f in keep.record], written=keep.written, removed=keep.removed,
                      metrics=[f.path for f in keep.metrics],
                      report=_record.report(p["record"]) if p["record"] is not None else None)
        if not self.module.check_mode:
            try:
                result["removed"] = keep.write()
            except _record.WriteError as e:
                self.failed(str(e), result)
            if keep.warning:
                self.module.warn(keep.warning)
        self.module.exit_json(changed=bool(result["written"] or result["removed"]), **result)
