# -*- coding: utf-8 -*-
# Copyright: inferops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""model_prewarm: read a model's weight files into the page cache, as their owner, saying how far it got."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import time

from ansible_collections.inferops.sglang.plugins.module_utils._base import Base
from ansible_collections.inferops.sglang.plugins.module_utils._host import owner as _owner, pagecache as _pagecache
from ansible_collections.inferops.sglang.plugins.module_utils._host.progress import ProgressFile
from ansible_collections.inferops.sglang.plugins.module_utils._server import model_files as _model_files


def progress_line(done, elapsed):
    """Where the warm is, in one line: the seconds since the module began and what it has read of what it plans to
    read (done: pagecache.warm's progress, {} before its first)."""
    try:
        read, planned = int(done.get("read") or 0), int(done.get("planned") or 0)
    except (TypeError, ValueError):
        read = planned = 0
    line = "warming the page cache, %d s" % int(elapsed)
    return line + (": %s of %s read" % (_model_files.size(read), _model_files.size(planned)) if planned else ": starting")


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
        """The warm's result (_pagecache.warm), read as owner, its progress appended to the progress file meanwhile:
        a line at once, then one every `every` seconds, each what was read and its words (progress_line)."""
        p = self.params
        try:
            progress = ProgressFile(p["progress"]) if p["progress"] else None
            if progress:
                progress.say(progress_line({}, time.monotonic() - self.t0))
        except OSError as e:
            self.fail("the progress file %s could not be made: %s" % (p["progress"], e))

        def tell(done):  # in the child that became the owner: through the descriptor opened here
            progress.say(progress_line(done, time.monotonic() - self.t0), **done)
        try:
            return owner.call(_pagecache.warm, p["paths"], int(p["margin_gib"] * _pagecache.GIB), p["budget"],
                              _pagecache.READERS, tell if progress else None, p["every"])
        except OSError as e:
            return {"read": 0, "seconds": 0.0, "errors": ["the warm as %s failed: %s" % (owner, e)]}
        finally:
            if progress:
                progress.close()
