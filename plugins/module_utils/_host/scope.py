# -*- coding: utf-8 -*-
# Copyright: inferops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""A running server adopted by systemd in place: its family moved into a transient scope, and a watcher.

The scope (<unit>-adopted.scope) is made with systemd's D-Bus API (StartTransientUnit with PIDs, through busctl,
systemd >= 221). It conflicts with the service and is ordered before it, so starting the service stops the scope
first. A scope has no main process: its KillMode=mixed sends SIGKILL to all at once. The drain comes from the
watcher (<unit>-adopted-watch.service, PartOf= and After= the scope, started with systemd-run): stopping the scope
stops the watcher first, which sends SIGTERM to the server and waits, up to the drain budget, for it to end; then
the scope kills what is left, orphans included. When the server ends on its own (a crash, an OOM kill), the
watcher starts the service - unless a switch of the port holds its lock (it stops the server on purpose).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os

from ansible_collections.inferops.sglang.plugins.module_utils._host.procfs import unit_of

SYSTEMD = ("org.freedesktop.systemd1", "/org/freedesktop/systemd1", "org.freedesktop.systemd1.Manager")
STOP_MARGIN = 15  # the watcher's TimeoutStopSec beyond the drain budget

# The watcher, run by the module's interpreter: standard library only, no file of the collection (the module's
# payload is gone once the module ends). argv: pid starttime service drain lock
WATCHER = r"""
import fcntl, os, signal, subprocess, sys, time
pid, start, service, drain, lock = int(sys.argv[1]), sys.argv[2], sys.argv[3], float(sys.argv[4]), sys.argv[5]
def alive():
    try:
        with open('/proc/%d/stat' % pid) as f:
            s = f.read()
    except OSError:
        return False
    f = s[s.rfind(')') + 2:].split()
    return f[0] not in 'ZX' and f[19] == start
def stop(signum, frame):
    if alive():
        os.kill(pid, signal.SIGTERM)
    end = time.monotonic() + drain
    while alive() and time.monotonic() < end:
        time.sleep(0.1)
    sys.exit(0)
signal.signal(signal.SIGTERM, stop)
while alive():
    time.sleep(0.1)
try:
    fd = os.open(lock, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        sys.exit(0)
except OSError:
    pass
sys.exit(subprocess.call(['systemctl', 'start', '--no-block', service]))
"""


class ScopeError(Exception):
    pass


def names(unit):
    """(scope, watcher) of a service's name without .service."""
    return unit + "-adopted.scope", unit + "-adopted-watch.service"


def _busctl(method, signature):
    return ["busctl", "call"] + list(SYSTEMD) + [method, signature]


def start_argv(scope, pids, service, drain, description):
    """busctl's argv of StartTransientUnit: the scope with pids, the service's stop semantics, conflicting with the
    service and ordered before it; garbage-collected once it ends, failed or not; delegated, so that kin born
    outside it during the move can join it (AttachProcessesToUnit takes only delegated units)."""
    pids = [int(p) for p in pids]
    if not pids:
        raise ScopeError("no process to move into %s" % scope)
    props = [("PIDs", "au", [len(pids)] + pids),
             ("Description", "s", [description]),
             ("KillMode", "s", ["mixed"]),
             ("TimeoutStopUSec", "t", [int(round(float(drain) * 1000000))]),
             ("Conflicts", "as", [1, service]),
             ("Before", "as", [1, service]),
             ("CollectMode", "s", ["inactive-or-failed"]),
             ("Delegate", "b", ["true"])]
    argv = _busctl("StartTransientUnit", "ssa(sv)a(sa(sv))") + [scope, "fail", str(len(props))]
    for name, signature, values in props:
        argv += [name, signature] + [str(v) for v in values]
    return argv + ["0"]


def attach_argv(scope, pids):
    """busctl's argv of AttachProcessesToUnit (systemd >= 238): more pids into a running scope."""
    pids = [int(p) for p in pids]
    return _busctl("AttachProcessesToUnit", "ssau") + [scope, "", str(len(pids))] + [str(p) for p in pids]


def parse_reply(out):
    """The object path busctl printed for a call that returns one (`o "/org/.../job/42"`)."""
    text = (out or "").strip()
    if not text.startswith("o "):
        raise ScopeError("unexpected answer from busctl: %r" % text[:200])
    return text[2:].strip().strip('"')


def watch_argv(python, scope, watcher, service, identity, drain, lock):
    """systemd-run's argv of the watcher: PartOf= and After= the scope; its stop drains the server."""
    pid, start = identity
    return ["systemd-run", "--unit", watcher, "--collect", "--quiet",
            "--description", "inferops.sglang: drains %s when it stops, starts %s when the server ends" % (scope, service),
            "--property=PartOf=" + scope, "--property=After=" + scope,
            "--property=TimeoutStopSec=%d" % (int(drain) + STOP_MARGIN),
            python, "-c", WATCHER, str(pid), str(start), service, "%g" % float(drain), lock]


def scope_of(pid, proc="/proc"):
    """The scope of the system's service manager the process is in (_procfs.unit_of), or None."""
    return unit_of(pid, ".scope", proc)


def since(start_ticks, proc="/proc"):
    """When a process started, in seconds since the epoch, from its start time in clock ticks."""
    with open(proc + "/stat") as f:
        btime = next(int(line.split()[1]) for line in f if line.startswith("btime "))
    return btime + start_ticks / float(os.sysconf("SC_CLK_TCK"))
