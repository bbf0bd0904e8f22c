# -*- coding: utf-8 -*-
# Copyright: inferops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Whether the folders a step is about to write to can take what it writes (writable, enough free space), looked
at before anything is written: a step refused for want of room leaves nothing behind."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os

KIB = 1024


def existing(path):
    """path, or its nearest folder above that exists (where a missing folder would be made)."""
    path = os.path.abspath(path)
    while not os.path.exists(path) and path != os.path.dirname(path):
        path = os.path.dirname(path)
    return path


def size(n):
    return "%d KiB" % ((n + KIB - 1) // KIB)


def problems(needs):
    """needs: [(what, folder, bytes it will receive)]. A problem for each filesystem among them that is read-only,
    or whose free space is less than its folders need together; [] when every one can take it."""
    by_fs, order = {}, []
    for what, folder, need in needs:
        there = existing(folder)
        try:
            dev = os.stat(there).st_dev
            vfs = os.statvfs(there)
        except OSError as e:
            return ["%s %s cannot be looked at: %s" % (what, folder, e)]
        if dev not in by_fs:
            by_fs[dev] = dict(names=[], need=0, vfs=vfs, at=there)
            order.append(dev)
        by_fs[dev]["names"].append("%s %s" % (what, folder))
        by_fs[dev]["need"] += need
    out = []
    for dev in order:
        fs = by_fs[dev]
        names, vfs = " and ".join(fs["names"]), fs["vfs"]
        if vfs.f_flag & os.ST_RDONLY or not os.access(fs["at"], os.W_OK):
            out.append("%s cannot be written: %s is on a read-only filesystem" % (names, fs["at"]))
        elif vfs.f_bavail * vfs.f_frsize < fs["need"]:
            out.append("%s: %s free in its filesystem (%s), %s needed" % (
                names, size(vfs.f_bavail * vfs.f_frsize), fs["at"], size(fs["need"])))
    return out
