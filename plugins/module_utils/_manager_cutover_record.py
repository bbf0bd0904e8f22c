# -*- coding: utf-8 -*-
# Copyright: inferops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""cutover_record: the record of a cutover or a rollback in the port's state folder."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.inferops.sglang.plugins.module_utils._switch import record as _record
from ansible_collections.inferops.sglang.plugins.module_utils._base import Base


class CutoverRecord(Base):
    """The record of a cutover or a rollback in the port's state folder: last.json (and last.md), plus one
    file per run named after its time."""

    def run(self):
        p = self.params
        try:
            files = _record.files(p["dir"], p["kind"], p["record"])
        except ValueError as e:
            self.fail(str(e))
        written = [f.path for f in files if f.differs]
        self.write_files(files)
        self.module.exit_json(changed=bool(written), files=[f.path for f in files], written=written,
                              report=_record.report(p["record"]))
