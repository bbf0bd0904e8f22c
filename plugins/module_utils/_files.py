# -*- coding: utf-8 -*-
# Copyright: inferops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Files written whole, only when they differ (content, mode or owner), atomically (a temporary file renamed)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import hashlib
import json
import os
import stat


def sha1(text):
    return hashlib.sha1(text.encode("utf-8")).hexdigest()


class File:
    """What a file should hold; `differs` compares it with the disk once, `write` makes it so."""

    def __init__(self, path, content, mode, uid=None, gid=None, dir_mode=None):
        self.path, self.content, self.mode, self.uid, self.gid, self.dir_mode = path, content, mode, uid, gid, dir_mode
        self.before = None  # the text on disk, None when absent or unreadable as text
        self.exists = False
        try:
            st = os.stat(path)
        except OSError:
            self.differs = True
            return
        self.exists = True
        try:
            with open(path, "rb") as f:
                self.before = f.read().decode("utf-8")
        except (OSError, UnicodeDecodeError):
            self.before = None
        self.differs = (self.before != content or stat.S_IMODE(st.st_mode) != mode
                        or uid is not None and st.st_uid != uid or gid is not None and st.st_gid != gid)

    @property
    def content_differs(self):
        return self.before != self.content

    def write(self):
        folder = os.path.dirname(self.path)
        if not os.path.isdir(folder):
            os.makedirs(folder, mode=self.dir_mode or 0o755)
        if self.dir_mode is not None:
            os.chmod(folder, self.dir_mode)
        tmp = os.path.join(folder, ".%s.%d.tmp" % (os.path.basename(self.path), os.getpid()))
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(self.content.encode("utf-8"))
                f.flush()
                os.fsync(f.fileno())
            if self.uid is not None or self.gid is not None:
                os.chown(tmp, -1 if self.uid is None else self.uid, -1 if self.gid is None else self.gid)
            os.chmod(tmp, self.mode)
            os.replace(tmp, self.path)
        except BaseException:
            if os.path.exists(tmp):
                os.unlink(tmp)
            raise

    def diff(self, shown=None):
        """A diff entry for Ansible's diff mode; `shown` replaces both texts (for secrets)."""
        before = "" if not self.exists else (self.before if self.before is not None else "(not text)\n")
        after = self.content
        if shown is not None:
            before, after = shown(before) if self.exists else "", shown(after)
        return dict(before_header=self.path, after_header=self.path, before=before, after=after)


def read_json(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None
