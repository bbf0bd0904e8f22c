# -*- coding: utf-8 -*-
# Copyright: inferops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""sglang_unit: the unit, its environment file and its readiness gate, in one call."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.inferops.sglang.plugins.module_utils._host import unit as _unit
from ansible_collections.inferops.sglang.plugins.module_utils._base import Base


class SglangUnit(Base):
    """The unit, its environment file and its readiness gate: verified, written when they differ, enabled,
    started or restarted when asked, in one call."""

    def run(self):
        p = self.params
        result = _unit.install(self, p, enabled=p["enabled"], state=p["state"], restart_on_change=p["restart_on_change"])
        if result["restart_needed"]:
            self.module.warn("%s changed while running; it was NOT restarted (restart_on_change is false). Restart it "
                             "when convenient, or let the cutover do it." % result["unit"])
        del result["seconds"]
        result["elapsed"] = self.elapsed()
        self.module.exit_json(**result)
