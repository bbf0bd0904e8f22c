# -*- coding: utf-8 -*-
# Copyright: inferops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Stopping processes: signal -> grace -> escalate, with an event-driven wait and pid-reuse safety."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import signal
import time

from ansible_collections.inferops.sglang.plugins.module_utils._host import procfs as _procfs

POLL = 0.01  # seconds between looks at /proc while waiting
SETTLE = 0.25  # mixed mode: how long the rest of a tree may take to follow its root before escalation


def signum(name):
    """'TERM', 'SIGTERM', '15' -> 15; ValueError on anything else."""
    text = str(name).strip().upper()
    if text.isdigit():
        num = int(text)
        signal.Signals(num)  # ValueError when unknown
        return num
    if not text.startswith("SIG"):
        text = "SIG" + text
    try:
        return int(getattr(signal.Signals, text))
    except AttributeError:
        raise ValueError("unknown signal %r" % name)


def signame(num):
    return signal.Signals(num).name[3:]


def send(identity, sig):
    """Signal the process with this (pid, starttime) and no other: True if sent, False if it is gone.

    With pidfd (Linux 5.3+, Python 3.9+) the check and the signal refer to the same process;
    without it, the start time is checked immediately before kill().
    """
    pid, start = identity
    pidfd = None
    if hasattr(os, "pidfd_open") and hasattr(signal, "pidfd_send_signal"):
        try:
            pidfd = os.pidfd_open(pid)
        except OSError:
            return False
    try:
        if not _procfs.is_alive(identity):
            return False
        try:
            if pidfd is not None:
                signal.pidfd_send_signal(pidfd, sig)
            else:
                os.kill(pid, sig)
        except ProcessLookupError:
            return False
        return True
    finally:
        if pidfd is not None:
            os.close(pidfd)


def wait_gone(identities, timeout, poll=POLL, until=None):
    """Wait until none of the processes is alive, until() is true, or timeout. Returns the survivors (a list)."""
    alive = [i for i in identities if _procfs.is_alive(i)]
    deadline = time.monotonic() + max(0.0, timeout)
    while alive:
        if time.monotonic() >= deadline or (until is not None and until()):
            break
        time.sleep(poll)
        alive = [i for i in alive if _procfs.is_alive(i)]
    return alive


class Stop:
    """The outcome of stop(): per target what was sent and how it ended."""

    def __init__(self):
        self.sent = {}       # pid -> [signal names]
        self.ended_by = {}   # pid -> "signal" | "escalation" | "gone before" | "with its parent"
        self.remaining = []  # pids alive at the end
        self.stuck = []      # pids in uninterruptible sleep (D) after the escalation
        self.escalated = False
        self.done_early = False  # the grace was cut short because done() said so
        self.elapsed = 0.0
        self.timings = {}


def stop(targets, roots=None, sig=signal.SIGTERM, escalate=signal.SIGKILL, grace=30.0, kill_wait=10.0, mode="all",
         done=None):
    """Stop targets (Process objects).

    mode 'all': sig to every target, wait up to grace, escalate the survivors, wait up to kill_wait.
    mode 'mixed' (systemd's KillMode=mixed): sig to the roots only, wait up to grace for them, then
    escalate everything of the tree still alive, wait up to kill_wait.
    done: a callable; once it is true, the grace is over (the server has finished its work).
    """
    t0 = time.monotonic()
    result = Stop()
    ids = dict((p.pid, p.identity) for p in targets)
    first = [p.pid for p in (roots if mode == "mixed" and roots is not None else targets)]
    for pid in first:
        if send(ids[pid], sig):
            result.sent.setdefault(pid, []).append(signame(sig))
        else:
            result.ended_by[pid] = "gone before"
    waited_for = [ids[pid] for pid in first]
    survivors = wait_gone(waited_for, grace, until=done)
    result.timings["first_signal"] = round(time.monotonic() - t0, 3)
    result.done_early = bool(survivors) and result.timings["first_signal"] < grace  # done() cut the wait short
    for pid in first:
        if ids[pid] not in survivors:
            result.ended_by.setdefault(pid, "signal")
    if mode == "mixed":
        # the rest of a tree follows its root within moments (PR_SET_PDEATHSIG): let it, briefly
        rest = [ids[pid] for pid in ids if pid not in first]
        if rest and not survivors:
            wait_gone(rest, SETTLE)
        for pid in ids:
            if pid not in first and not _procfs.is_alive(ids[pid]):
                result.ended_by.setdefault(pid, "with its parent")
    left = [pid for pid in ids if _procfs.is_alive(ids[pid])]
    if left:
        result.escalated = True
        for pid in left:
            if send(ids[pid], escalate):
                result.sent.setdefault(pid, []).append(signame(escalate))
        still = wait_gone([ids[pid] for pid in left], kill_wait)
        for pid in left:
            if ids[pid] not in still:
                result.ended_by[pid] = "escalation"
        result.remaining = [i[0] for i in still]
        result.stuck = [pid for pid in result.remaining if _procfs.state(pid) == "D"]
    result.elapsed = round(time.monotonic() - t0, 3)
    return result


def stop_loop(wrapper):
    """A wrapper of the server (the preflight's, with its start time) that is a shell loop would start a second
    copy: SIGKILL to the loop alone, the server untouched. Anything else is left alone. Returns what was done."""
    if not wrapper or wrapper["kind"] != "shell loop":
        return {"note": "no wrapper loop" if not wrapper else "%s left alone (it does not restart the server)" % wrapper["kind"]}
    sent = send((wrapper["pid"], wrapper["starttime"]), 9)
    return {"pid": wrapper["pid"], "signal": "KILL" if sent else "gone before"}
