# -*- coding: utf-8 -*-
# Copyright: inferops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""cutover_record: the record of a cutover or a rollback in the port's state folder."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.inferops.sglang.plugins.module_utils._switch import record as _record
from ansible_collections.inferops.sglang.plugins.module_utils._base import Base

HISTORY_KEEP = _record.HISTORY_KEEP  # cutover_record's default


class CutoverRecord(Base):
    """The record of a cutover or a rollback in the port's state folder: last.json (and last.md), plus each run's
    own in history/, named after its time, the newest `history` kept."""

    def run(self):
        p = self.params
        try:
            files = _record.files(p["dir"], p["kind"], p["record"])
            removed = _record.cut(p["dir"], p["history"], files)
        except ValueError as e:
            self.fail(str(e))
        written = [f.path for f in files if f.differs]
        self.write_files(files)
        if not self.module.check_mode:
            try:
                removed = _record.tidy(p["dir"], p["history"])
            except OSError as e:
                self.fail("the record is written, but its history could not be cut to %d: %s" % (p["history"], e))
        self.module.exit_json(changed=bool(written or removed), files=[f.path for f in files], written=written,
                              removed=removed, report=_record.report(p["record"]))
