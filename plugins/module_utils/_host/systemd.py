# -*- coding: utf-8 -*-
# Copyright: inferops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""systemctl and journalctl, always with a timeout; the end of a log file, read as whoever controls its folder."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import re
import signal

from ansible_collections.inferops.sglang.plugins.module_utils._host import owner as _owner
from ansible_collections.inferops.sglang.plugins.module_utils._host.command import CommandError, timed

TIMEOUT = 15
UNIT_PROPERTIES = ("ActiveState", "SubState", "NRestarts", "Result", "MainPID", "ExecMainStatus", "ExecMainCode",
                   "LoadState")


class Verbs:
    """systemctl's verbs the collection runs, each written here once (--version stands where a verb would)."""
    SHOW = "show"
    START = "start"
    STOP = "stop"
    RESTART = "restart"
    KILL = "kill"
    RESET_FAILED = "reset-failed"
    ENABLE = "enable"
    DISABLE = "disable"
    DAEMON_RELOAD = "daemon-reload"
    VERSION = "--version"


VERBS = tuple(v for k, v in sorted(vars(Verbs).items()) if k.isupper())


def _flag(text):
    return lambda value: [text]


def _equals(text):
    return lambda value: [text + "=" + (",".join(value) if isinstance(value, (list, tuple)) else str(value))]


# systemctl's options the collection passes, each written here once: (keyword, how it is written, whether it stands
# before the verb). systemctl reads an option anywhere; each keeps the place it has always had on the command line.
# A keyword given None or False is left out.
OPTIONS = (
    ("no_reload", _flag("--no-reload"), True),
    ("no_block", _flag("--no-block"), False),
    ("runtime", _flag("--runtime"), False),
    ("signal", _equals("--signal"), False),
    ("properties", _equals("--property"), False),
    ("value", _flag("--value"), False),
)


def argv(verb, units=(), **options):
    """systemctl's argv: `systemctl [options before the verb] VERB [options] UNIT...`, verb one of Verbs, units a name
    or a list of names, options keywords of OPTIONS (properties: a name or a list of them; signal: its name)."""
    # a verb or an option outside the tables is a slip of the caller's code (never an input: callers name Verbs and
    # OPTIONS' keywords), a KeyError naming it
    if verb not in VERBS:
        raise KeyError(verb)
    unknown = sorted(set(options) - set(name for name, dummy, dummy2 in OPTIONS))
    if unknown:
        raise KeyError(", ".join(unknown))
    before, after = [], []
    for name, write, first in OPTIONS:
        if options.get(name) not in (None, False):
            (before if first else after).extend(write(options[name]))
    return ["systemctl"] + before + [verb] + after + ([units] if isinstance(units, str) else list(units))


def call(run, args, timeout=TIMEOUT):
    """(rc, out, err) of a systemctl argv (argv()'s) through run: the caller's (AnsibleModule.run_command, or
    command.run_command where there is no module), under coreutils' timeout (command.timed: CommandError when it
    runs out); timeout None runs it as it is (a start that systemd bounds with the unit's TimeoutStartSec)."""
    return run(args) if timeout is None else timed(run, args, timeout)


def systemctl(run, verb, units=(), timeout=TIMEOUT, **options):
    """call() of argv(verb, units, **options): the one runner of systemctl."""
    return call(run, argv(verb, units, **options), timeout)


def show(run, unit, properties=UNIT_PROPERTIES):
    """{property: value} of a unit, from `systemctl show`."""
    return show_many(run, [unit], properties)[0]


def show_many(run, units, properties=UNIT_PROPERTIES):
    """[{property: value}] of each unit, in order, from one `systemctl show` (a block per unit)."""
    rc, out, err = systemctl(run, Verbs.SHOW, units, properties=properties)
    if rc != 0:
        raise RuntimeError("systemctl show %s failed (rc %d): %s" % (" ".join(units), rc, err.strip()))
    blocks = [properties_of(block) for block in out.strip("\n").split("\n\n")]
    if len(blocks) != len(units):
        raise RuntimeError("systemctl show answered %d blocks for %d units" % (len(blocks), len(units)))
    return blocks


def properties_of(text):
    """{property: value} of one unit's block of `systemctl show` output."""
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line)


def journal(run, unit, lines=20):
    """The unit's last journal lines (empty list when journalctl is missing or fails)."""
    try:
        rc, out, dummy = timed(run, ["journalctl", "-u", unit, "-n", str(lines), "--no-pager", "-o", "cat"], TIMEOUT)
    except (OSError, CommandError):
        return []
    return out.splitlines()[-lines:] if rc == 0 else []


# systemd's own messages about a unit (sd-messages.h; journalctl's catalog names each): the unit failed, with its result
# (UNIT_RESULT: exit-code, signal, core-dump, watchdog, timeout...); it ended in a way it counts as clean ("Deactivated
# successfully"); a restart of it scheduled (Restart=); a start of it (each run's end counts until the next start).
UNIT_FAILED = "d9b373ed55a64feb8242e02dbe79a49c"
UNIT_SUCCESS = "7ad2d189f7e94e70a38c781354912448"
UNIT_STARTING = "7d4958e842da4a758f6c1cdc7b36dcc5"
RESTART_SCHEDULED = "5eb03494b6584870a536b337290809b3"
# what the unit's liveness checker (roles/systemd_unit/files/inferops-sglang-ready --live) says when it stops feeding
# the watchdog: the why of a restart whose result is `watchdog`
_LIVENESS = re.compile(r"liveness: no answer from /health_generate \([^()]{0,80}\) and no progress: [^\n]{0,200}\Z")


def restarts(run, unit):
    """The restarts systemd made of the unit (Restart=), by reason, as its journal keeps them: {'total', 'reasons':
    {result: count}, 'last': {'reason', 'at' (seconds since the epoch), 'why' (the liveness checker's word, for
    `watchdog`)} or None}. Only systemd's own entries count (_PID 1: no process of the unit can write one); what the
    journal has rotated away is not counted. None when the journal cannot be read."""
    try:
        rc, out, dummy = timed(run, ["journalctl", "-u", unit, "-o", "json", "--no-pager",
                                     "--output-fields=MESSAGE_ID,UNIT_RESULT,MESSAGE,_PID"], TIMEOUT)
    except (OSError, CommandError):
        return None
    if rc != 0:
        return None
    reasons, last, result, why, said = {}, None, None, None, None
    for line in out.splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        message = entry.get("MESSAGE")
        if isinstance(message, str) and _LIVENESS.match(message):
            why = message[len("liveness: "):]
        if entry.get("_PID") != "1":
            continue
        if isinstance(message, str) and "Watchdog timeout" in message:
            said, why = why, None  # the checker's word before systemd acted, not what it saw of the server's end
        if entry.get("MESSAGE_ID") == UNIT_STARTING:
            result = None  # a stop's clean end is no restart's reason
        elif entry.get("MESSAGE_ID") == UNIT_FAILED:
            result = entry.get("UNIT_RESULT") or "unknown"
        elif entry.get("MESSAGE_ID") == UNIT_SUCCESS:
            # an end the unit counts as clean, restarted all the same: SIGKILL (SuccessExitStatus=, since SGLang ends
            # its own drained stop so; RestartForceExitStatus=: an OOM kill, a kill -9), or a rank's exit with Restart=always
            result = "success"
        elif entry.get("MESSAGE_ID") == RESTART_SCHEDULED:
            reason = result or "unknown"
            reasons[reason] = reasons.get(reason, 0) + 1
            at = entry.get("__REALTIME_TIMESTAMP")
            last = {"reason": reason, "at": int(at) / 1e6 if str(at).isdigit() else None,
                    "why": said if reason == "watchdog" else None}
            result, why, said = None, None, None
    return {"total": sum(reasons.values()), "reasons": reasons, "last": last}


def _end(path, size):
    """The text of the last `size` bytes of a regular file (never through a link at its last component, never a FIFO)."""
    return _owner.read_regular(path, limit=size).decode("utf-8", "replace")


def tail(path, lines=20):
    """The last lines of a log file, read as whoever controls its folder (a server's owner's log as that owner: never a
    root-only file they linked to); [] when it cannot be read so, or root's folder is one another user can change."""
    folder = os.path.dirname(os.path.abspath(path))
    try:
        reader = _owner.Owner.of(folder)
        if reader.is_root and _owner.distrust(folder, sticky=True):
            return []
        data = reader.call(_end, path, 65536)
    except OSError:
        return []
    return data.splitlines()[-lines:]


def log_lines(run, redact, unit=None, log_file=None, lines=20):
    """The end of the unit's journal, else of the log file, each line through redact ([] with neither)."""
    if unit:
        found = journal(run, unit, lines)
    elif log_file:
        found = tail(log_file, lines)
    else:
        found = []
    return [redact(line) for line in found]


# What the exits SGLang ends with mean (seen on a real 0.5.15, read in the wheels of the others).
_EXITS = {
    ("exited", 1): "SGLang's start failed (0.5.15+: a scheduler lost while loading)",
    ("exited", 3): "uvicorn's startup failure: the port was taken when it bound (by another SGLang server: it "
                   "talked to it, logged 'fired up', then exited)",
    ("killed", 9): "SGLang 0.5.15+ ends so after losing a scheduler (the OOM killer, say), and so does a server "
                   "whose port another program held; 0.5.5-0.5.15 end a drained stop so too",
}


def exit_of(props):
    """How the unit's main process ended, in words, from ExecMainCode (1 exited, 2 killed, 3 dumped: the kernel's
    si_code) and ExecMainStatus (the exit status, or the signal): "exited with status 1 (what that means)",
    "was killed by SIGKILL (...)"; None while it has not ended."""
    code, status = props.get("ExecMainCode"), props.get("ExecMainStatus")
    try:
        code, status = int(code or 0), int(status or 0)
    except ValueError:
        return None
    if code == 1:
        how, text = "exited", "exited with status %d" % status
    elif code in (2, 3):
        how = "killed"
        try:
            name = signal.Signals(status).name
        except ValueError:
            name = "signal %d" % status
        text = "was killed by %s%s" % (name, " (core dumped)" if code == 3 else "")
    else:
        return None
    meaning = _EXITS.get((how, status))
    return "%s%s" % (text, ": %s" % meaning if meaning else "")


def served(props):
    """Whether the unit served in its current (or last) start: it is active (its readiness gate passed), or became
    active after its main process started (from `systemctl show`'s ActiveState, ActiveEnterTimestampMonotonic and
    ExecMainStartTimestampMonotonic)."""
    if props.get("ActiveState") == "active":
        return True
    try:
        entered, started = int(props.get("ActiveEnterTimestampMonotonic") or 0), \
            int(props.get("ExecMainStartTimestampMonotonic") or 0)
    except ValueError:
        return False
    return 0 < started <= entered


class UnitWatch:
    """Tells when a unit can no longer come up: failed, stopped after it started, or restarted."""

    def __init__(self, run, unit):
        self.run = run
        self.unit = unit
        first = show(run, unit)
        if first.get("LoadState") == "not-found":
            raise RuntimeError("unit %s does not exist" % unit)
        self.restarts = int(first.get("NRestarts") or 0)
        self.seen_running = first.get("ActiveState") in ("active", "activating", "reloading")
        self.last = first

    def active(self):
        """None once the unit is active (its readiness gate passed), else what it is (a wait's gate)."""
        state = show(self.run, self.unit, ("ActiveState", "SubState"))
        if state.get("ActiveState") == "active":
            return None
        return "unit %s is %s (%s), not yet active" % (self.unit, state.get("ActiveState"), state.get("SubState"))

    def problem(self):
        """None while the unit may still come up; else why not."""
        p = self.show()
        state, sub = p.get("ActiveState"), p.get("SubState")
        ended = exit_of(p)
        how = "its main process %s" % ended if ended else "its main process exited"
        if int(p.get("NRestarts") or 0) > self.restarts:
            return "unit %s restarted (NRestarts %s -> %s)%s" % (
                self.unit, self.restarts, p.get("NRestarts"), ": before that, %s" % how if ended else "")
        if sub == "auto-restart":
            return "unit %s is in activating (auto-restart): %s (result %s)" % (self.unit, how, p.get("Result"))
        if sub == "start-post" and p.get("MainPID") == "0" and ended:
            return "unit %s: %s while ExecStartPost ran" % (self.unit, how)
        if state == "failed":
            return "unit %s failed (result %s): %s" % (self.unit, p.get("Result"), how if ended else "its start failed")
        if state in ("active", "activating", "reloading"):
            self.seen_running = True
        elif state in ("inactive", "deactivating") and self.seen_running:
            return "unit %s stopped (%s/%s): %s (result %s)" % (
                self.unit, state, sub, how if ended else "its main process has not exited yet", p.get("Result"))
        return None

    def show(self):
        self.last = show(self.run, self.unit)
        return self.last
