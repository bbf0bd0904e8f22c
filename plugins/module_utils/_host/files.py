# -*- coding: utf-8 -*-
# Copyright: inferops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Files written whole, only when they differ (content, mode or owner), atomically (a temporary file renamed)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import errno
import hashlib
import json
import os
import stat
import tempfile

from ansible_collections.inferops.sglang.plugins.module_utils._host.owner import user_name


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
        """The file made so: a new temporary file beside it (a random name, O_EXCL, never through a link), renamed
        over it. An existing folder is written into (and given dir_mode) only when its owner is the writer (root):
        OSError otherwise, nothing written."""
        folder = os.path.dirname(self.path)
        if not os.path.isdir(folder):
            os.makedirs(folder, mode=self.dir_mode or 0o755)
        st = os.stat(folder)
        if st.st_uid != os.geteuid():
            raise OSError(errno.EPERM, "%s is owned by %s, not by %s: nothing is written there" % (
                folder, user_name(st.st_uid), user_name(os.geteuid())))
        if self.dir_mode is not None and stat.S_IMODE(st.st_mode) != self.dir_mode:
            os.chmod(folder, self.dir_mode)
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=".%s." % os.path.basename(self.path), suffix=".tmp")
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
            if os.path.lexists(tmp):
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


def write_json(path, data, mode=0o600):
    """data written whole to path as JSON (a new temporary file beside it, O_EXCL with a random name, renamed over it),
    so that a reader without the lock never sees half of it."""
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".%s." % os.path.basename(path), suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(data, f, indent=2, sort_keys=True)
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        if os.path.lexists(tmp):
            os.unlink(tmp)
        raise
