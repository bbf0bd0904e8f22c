# -*- coding: utf-8 -*-
# Copyright: inferops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""model_prewarm: read a model's weight files into the page cache, as their owner, saying how far it got."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.inferops.sglang.plugins.module_utils._base import Base
from ansible_collections.inferops.sglang.plugins.module_utils._host import owner as _owner, pagecache as _pagecache
from ansible_collections.inferops.sglang.plugins.module_utils._host.progress import ProgressFile
from ansible_collections.inferops.sglang.plugins.module_utils._server import model_files as _model_files


class ModelPrewarm(Base):
    def run(self):
        p = self.params
        if p["budget"] < 0 or p["margin_gib"] < 0:
            self.fail("budget and margin_gib must be >= 0, not %r and %r" % (p["budget"], p["margin_gib"]))
        try:
            owner = _owner.Owner.named(p["user"], p["group"])
        except KeyError:
            self.fail("the user %s%s is not known on the host" % (
                p["user"], " or the group %s" % p["group"] if p["group"] else ""))
        try:
            held = owner.call(_pagecache.residency, p["paths"])
        except OSError as e:
            self.fail("the files could not be measured as %s: %s" % (owner, e))
        m = dict(files=len(p["paths"]), bytes=held["bytes"], resident=held["resident"], errors=held["errors"],
                 available=_pagecache.mem_available(), warm=None)
        if self.module.check_mode:
            m["warm_skipped"] = "check mode"
        elif held["resident"] >= held["bytes"]:
            m["warm_skipped"] = "all resident"
        else:
            m["warm"] = self.warm(owner)
        m["summary"] = _model_files.summary(m)
        self.module.exit_json(changed=False, msg=m["summary"], **m)

    def warm(self, owner):
        """The warm's result (_pagecache.warm), read as owner, its progress appended to the progress file meanwhile."""
        p = self.params
        try:
            progress = ProgressFile(p["progress"]) if p["progress"] else None
        except OSError as e:
            self.fail("the progress file %s could not be made: %s" % (p["progress"], e))
        try:
            return owner.call(_pagecache.warm, p["paths"], int(p["margin_gib"] * _pagecache.GIB), p["budget"],
                              _pagecache.READERS, progress.write if progress else None, p["every"])
        except OSError as e:
            return {"read": 0, "seconds": 0.0, "errors": ["the warm as %s failed: %s" % (owner, e)]}
        finally:
            if progress:
                progress.close()
