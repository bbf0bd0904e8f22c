# -*- coding: utf-8 -*-
# Copyright: inferops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""A progress file: the JSON lines a long step appends as it goes, for a look from outside (another connection) to
read the last of; root's, 0600, in a folder no one but root can change; removed once the step ends. Its descriptor
is opened before the step forks a child that drops its privileges, so that the child appends to root's file without
being able to open it.

Each line says where the step is in words (SAYS: the line a caller shows as it is, its secrets masked here, where it
is written: the one path of the step's words to the outside), with what it measured. A reader takes the last whole
line: each is appended by one write that ends with its newline, so what follows the last newline is a line still
being written."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import errno
import json
import os

from ansible_collections.inferops.sglang.plugins.module_utils._host import owner as _owner
from ansible_collections.inferops.sglang.plugins.module_utils._host.redact import Redactor

SAYS = "says"  # the key of a line's words


class ProgressFile:
    """Opened (created or emptied) at once; say(text, **measured) appends one line, its words through redact (a
    _host.redact.Redactor: the step's secrets); close() removes it."""

    def __init__(self, path, redact=None):
        self.redact = redact or Redactor()
        folder = os.path.dirname(path)
        if not os.path.isdir(folder):
            os.makedirs(folder, 0o700)
        why = _owner.distrust(folder)
        if why:
            raise OSError(errno.EPERM, "no progress file in %s: %s" % (folder, why))
        self.path = path
        self.fd = _owner.open_regular(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, uid=os.geteuid(), mode=0o600)
        os.ftruncate(self.fd, 0)

    def write(self, data):
        """One line of progress (appends of one small line each: a reader sees whole lines)."""
        os.write(self.fd, (json.dumps(data, sort_keys=True) + "\n").encode("utf-8"))

    def say(self, text, **measured):
        """One line of progress: where the step is, in words (secrets masked), and what it measured."""
        self.write(dict(measured, **{SAYS: self.redact(text)}))

    def close(self):
        os.close(self.fd)
        try:
            os.unlink(self.path)
        except OSError as e:
            if e.errno != errno.ENOENT:
                raise


def last(text):
    """The last whole line of a progress file's text (one its newline ends), as a dict ({} when there is none)."""
    for line in reversed((text or "").rpartition("\n")[0].splitlines()):
        try:
            data = json.loads(line)
        except ValueError:
            continue
        if isinstance(data, dict):
            return data
    return {}
