# -*- coding: utf-8 -*-
# Copyright: inferops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What every module's manager shares: its parameters, failing, writing files, timing."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import time

from ansible_collections.inferops.sglang.plugins.module_utils._redact import Redactor
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
