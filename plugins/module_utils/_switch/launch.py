# -*- coding: utf-8 -*-
# Copyright: inferops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The detached launch: the switch claimed under the lock, then its worker started apart from the module, in a
transient systemd unit (systemd-run; a new session where systemd is not PID 1), so that a dropped connection
cannot stop it half-way. The worker runs from a copy of the module's payload (Ansible removes the payload when the
module ends; the worker removes the copy when it ends)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import shutil
import subprocess
import sys
import tempfile
import zipfile

from ansible_collections.inferops.sglang.plugins.module_utils import _state_dir
from ansible_collections.inferops.sglang.plugins.module_utils._host import systemd as _systemd
from ansible_collections.inferops.sglang.plugins.module_utils._host.command import CommandError, run_command, timed

# Ansible puts into the module's payload only the module_utils the module imports: the worker's code travels in it
# because this file imports it.
from ansible_collections.inferops.sglang.plugins.module_utils._switch import worker as _switch_worker
from ansible_collections.inferops.sglang.plugins.module_utils._switch.lock import claim, unclaim, worker_started


def _runtime():
    """Where this code lives: (path, is_zip). Under Ansible it is the module's payload zip, removed when the
    module ends, so launch() keeps a copy."""
    here = os.path.abspath(__file__)
    path = here
    while path != os.path.dirname(path):
        if os.path.isfile(path) and zipfile.is_zipfile(path):
            return path, True
        path = os.path.dirname(path)
    marker = os.sep + "ansible_collections" + os.sep
    return here[:here.rfind(marker)], False


def worker_unit(port, run_id):
    """The transient unit the worker of switch run_id of port runs in, where systemd is PID 1."""
    return "inferops-sglang-switch-%d-%s.service" % (port, run_id)


def worker_code(root, plan_file):
    """The worker's command line (python -c): its code found under root (a folder or the payload's copy)."""
    package, name = _switch_worker.__name__.rsplit(".", 1)
    return "import sys; sys.path.insert(0, %r); from %s import %s; %s.main(%r)" % (root, package, name, name, plan_file)


def runtime_bytes():
    """How much launch() copies into the state folder (the module's payload; nothing outside Ansible)."""
    root, is_zip = _runtime()
    return os.path.getsize(root) if is_zip else 0


def launch(plan, since, run=run_command, prepare=None):
    """Claim the switch of the port and start the worker detached; (id, argv): the id of the switch this run
    reports, and how its worker was started (None when it reports another run's switch, found in progress or
    finished since `since`). prepare: _switch_lock.claim's (under the lock, before the claim; returns the plan)."""
    state_dir = plan["state_dir"]
    os.makedirs(state_dir, mode=0o700, exist_ok=True)
    run_id, mine = claim(plan, since, prepare)
    if not mine:
        return run_id, None
    try:
        root, is_zip = _runtime()
        if is_zip:
            keep = _state_dir.runtime(state_dir, run_id)
            fd, tmp = tempfile.mkstemp(dir=state_dir, prefix=_state_dir.RUNTIME_TEMP[0], suffix=_state_dir.RUNTIME_TEMP[1])
            with os.fdopen(fd, "wb") as out, open(root, "rb") as src:
                shutil.copyfileobj(src, out)
            os.replace(tmp, keep)
            root = keep
        argv = [sys.executable, "-c", worker_code(root, _state_dir.plan(state_dir, run_id))]
        if os.path.isdir("/run/systemd/system") and shutil.which("systemd-run"):
            unit = worker_unit(plan["port"], run_id)
            argv = ["systemd-run", "--unit", unit, "--collect", "--quiet", "--property=KillMode=process",
                    "--description", "inferops.sglang switch of port %d to %s" % (plan["port"], plan["unit"])] + argv
            rc, out, err = timed(run, argv, 30)
            if rc != 0:
                raise RuntimeError("systemd-run failed (rc %d): %s" % (rc, (err or out).strip()))
            pid = _main_pid(run, unit)  # systemd-run returns once the unit's process is forked
        else:
            with open(os.devnull, "r+") as null:
                # detached on purpose: run_command would wait for it
                pid = subprocess.Popen(argv, stdin=null, stdout=null, stderr=null, close_fds=True,  # pylint: disable=ansible-bad-function
                                       start_new_session=True).pid
    except Exception as e:
        unclaim(state_dir, run_id, "the switch could not be started: %s" % e)
        raise
    if pid is not None:
        worker_started(state_dir, run_id, pid)
    return run_id, argv


def _main_pid(run, unit):
    """The main process of the worker's transient unit; 0 once it ended (the unit collected); None when systemd did
    not say (the claim then stands for outcome.LAUNCH_WAIT)."""
    try:
        pid = _systemd.show(run, unit, ("MainPID",)).get("MainPID", "")
    except (RuntimeError, CommandError):
        return None
    return int(pid) if pid.isdigit() else None
