# -*- coding: utf-8 -*-
# Copyright: inferops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The rollback's relaunch: the captured command (capture.json in the port's state folder, as discovery took it)
started again exactly as it ran, detached, as nohup left it - unless the capture is refused (_capture.refusals: a
setuid program's, an argv[0] that is not what ran, root's run of what another user can change)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import subprocess

from ansible_collections.inferops.sglang.plugins.module_utils import _state_dir
from ansible_collections.inferops.sglang.plugins.module_utils._host import owner as _owner
from ansible_collections.inferops.sglang.plugins.module_utils._host.files import read_json
from ansible_collections.inferops.sglang.plugins.module_utils._server import capture as _capture


def relaunch(state_dir):
    """The captured command (its wrapper loop, when it had one) exactly as it ran: argv, environment, cwd, user, log
    file; in a session of its own, as nohup left it. Returns what was started (its pid under "pid"; under "log" the
    file its output goes to, None when the captured one could not be opened as its user)."""
    cap = read_json(_state_dir.capture(state_dir))
    if not cap:
        raise RuntimeError("no capture in %s: nothing to start again" % state_dir)
    what = cap.get("wrapper") or cap
    refused = _capture.refusals(what)
    if refused:
        raise RuntimeError("the captured command is not started again: %s" % "; ".join(refused))
    pid, log = launch_detached(what)
    return {"pid": pid, "argv0": what["argv"][0], "wrapper": bool(cap.get("wrapper")), "log": log,
            "log_captured": what.get("stdout")}


def launch_detached(what):
    """Start what.argv with what's environment, cwd and log files, as what's own uid and gid (a wrapper loop's, not
    the server's: a user's loop around a server started with sudo is that user's); (pid, where its stdout goes).

    The child becomes that user before it touches anything of theirs: it enters the cwd and opens the log files as
    them (appending, never through a link at the last component, a regular file of theirs only; created when missing,
    as nohup would). A log it cannot open so stays /dev/null. For a root process the log's folder must be one no
    other user can change."""
    exe = what.get("argv0_resolved") or what.get("exe")
    owner = _owner.Owner(what.get("uid", 0), what.get("gid"))
    out_path, err_path = what.get("stdout"), what.get("stderr")
    if owner.is_root:
        out_path, err_path = [p if p and not _owner.distrust(os.path.dirname(p), sticky=True) else None for p in (out_path, err_path)]
    cwd = what["cwd"]

    def become():
        owner.drop()
        os.chdir(cwd)
        opened = {}
        for fd, path in ((1, out_path), (2, err_path)):
            if not path:
                continue
            if path in opened:
                os.dup2(opened[path], fd)
                continue
            try:
                log = _owner.open_regular(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, uid=owner.uid)
            except OSError:
                continue  # stays /dev/null
            os.dup2(log, fd)
            os.close(log)
            opened[path] = fd

    with open(os.devnull, "r+b") as null:
        try:
            p = subprocess.Popen(what["argv"], executable=exe, env=what["environment"],  # pylint: disable=ansible-bad-function
                                 stdin=null, stdout=null, stderr=null, close_fds=True, start_new_session=True,
                                 preexec_fn=become)
        except subprocess.SubprocessError as e:  # become() failed in the child
            raise RuntimeError("could not start %s as %s in %s: %s" % (what["argv"][0], owner, cwd, e))
    try:
        log = os.readlink("/proc/%d/fd/1" % p.pid)
    except OSError:
        log = None
    return p.pid, None if log in (None, os.devnull) else log
