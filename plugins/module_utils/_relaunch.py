# -*- coding: utf-8 -*-
# Copyright: inferops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The rollback's relaunch: the captured command (capture.json in the port's state folder, as discovery took it)
started again exactly as it ran, detached, as nohup left it."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import subprocess

from ansible_collections.inferops.sglang.plugins.module_utils._files import read_json


def relaunch(state_dir):
    """The captured command (its wrapper loop, when it had one) exactly as it ran: argv, environment, cwd,
    user, log file; in a session of its own, as nohup left it. Returns what was started (its pid under "pid")."""
    cap = read_json(os.path.join(state_dir, "capture.json"))
    if not cap:
        raise RuntimeError("no capture in %s: nothing to start again" % state_dir)
    what = cap.get("wrapper") or cap
    pid = launch_detached(what, cap)
    return {"pid": pid, "argv0": what["argv"][0], "wrapper": bool(cap.get("wrapper")), "log": what.get("stdout")}


def launch_detached(what, cap):
    """Start what.argv with what's environment, cwd and log files as cap's user; returns its pid."""
    exe = what.get("argv0_resolved") or what.get("exe")
    uid, gid = cap.get("uid", 0), cap.get("gid", 0)

    def demote():
        if os.getuid() != uid:
            os.setgroups([])
            os.setgid(gid)
            os.setuid(uid)

    with open(os.devnull, "r+b") as null:
        out = open(what["stdout"], "ab") if what.get("stdout") else null
        err = out if what.get("stderr") == what.get("stdout") else (open(what["stderr"], "ab") if what.get("stderr") else null)
        try:
            p = subprocess.Popen(what["argv"], executable=exe, env=what["environment"], cwd=what["cwd"],  # pylint: disable=ansible-bad-function
                                 stdin=null, stdout=out, stderr=err, close_fds=True, start_new_session=True,
                                 preexec_fn=demote)
        finally:
            for f in set([out, err]) - set([null]):
                f.close()
    return p.pid
