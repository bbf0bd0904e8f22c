# -*- coding: utf-8 -*-
# Copyright: inferops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""A systemd unit's text before it is installed: optional dependencies, and systemd-analyze's verdict."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import shutil
import tempfile

from ansible_collections.inferops.sglang.plugins.module_utils._command import timed

TIMEOUT = 60


def with_wants(text, units):
    """The unit's text with `units` added to the first Wants= and After= of its [Unit] section (lines made when
    there is none): a unit that exists on this host only is pulled in and ordered before the service."""
    if not units:
        return text
    lines = text.split("\n")
    section, seen, header = None, set(), None
    for i, line in enumerate(lines):
        s = line.strip()
        if s.startswith("[") and s.endswith("]"):
            section = s
            if s == "[Unit]":
                header = i
            continue
        key = s.split("=", 1)[0] if "=" in s else None
        if section == "[Unit]" and key in ("Wants", "After") and key not in seen:
            seen.add(key)
            lines[i] = line.rstrip() + " " + " ".join(units)
    if header is None:
        lines = ["[Unit]"] + lines
        header = 0
    for key in ("After", "Wants"):
        if key not in seen:
            lines.insert(header + 1, "%s=%s" % (key, " ".join(units)))
    return "\n".join(lines)


def names(environment):
    """The variable names an environment file's text sets, sorted."""
    return sorted(set(line.split("=", 1)[0].strip() for line in environment.splitlines()
                      if "=" in line and not line.lstrip().startswith("#")))


def verify(run, text, service):
    """None when systemd-analyze accepts the unit's text as `service`, else what it said."""
    folder = tempfile.mkdtemp(prefix="inferops-unit-")
    try:
        path = os.path.join(folder, service)
        with open(path, "w") as f:
            f.write(text)
        rc, out, err = timed(run, ["systemd-analyze", "verify", "%s:%s" % (path, service)], TIMEOUT)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    if rc == 0:
        return None
    return (err.strip() or out.strip() or "rc %d" % rc).replace(path, service)
