# -*- coding: utf-8 -*-
# Copyright: inferops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The switch's vocabulary, each name written once (as supervisor's states.py holds its processes' states): what a run
of sglang_switch does to the port (its action) and what it switches to (its target), what serves the port (the
preflight's owner), the states of a switch's outcome file, what sglang_adopt does, and the kinds of record the port's
state folder keeps.

The manager, the worker, the outcome, the lock and the record name them from here. The modules' RETURN documents
the actions as choices (a unit test holds them equal to these), and the cutover role compares what the modules
return with those documented values only."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type


class Actions:
    """What a run of sglang_switch does to the port (its result's action)."""

    NONE = "none"          # nothing to do: the unit serves the port (back: the captured command does)
    SWITCH = "switch"      # an ad-hoc server stopped (drained), the unit started
    RESTART = "restart"    # the unit, serving, stopped and started again (what it runs, or the venv, changed)
    START = "start"        # nothing served the port: the unit started
    ROLLBACK = "rollback"  # back from the unit to what served before (the captured command, or the operator's unit)
    JOIN = "join"          # a switch of the port in progress (or finished since the run began), reported as its own
    STOP = "stop"          # what serves the port stopped (drained), its GPUs released, the unit put in place and not
    #                        started (start=false: one rank of a multi-node server, before every rank starts together)


ACTIONS = (Actions.NONE, Actions.SWITCH, Actions.RESTART, Actions.START, Actions.ROLLBACK, Actions.JOIN, Actions.STOP)
# this run claims a switch and starts its worker: the room is looked at
LAUNCHING = (Actions.SWITCH, Actions.RESTART, Actions.START, Actions.ROLLBACK, Actions.STOP)
# ... and the worker starts a server: the interpreter's answers count
STARTING = (Actions.SWITCH, Actions.RESTART, Actions.START, Actions.ROLLBACK)
# a server that serves is stopped for the unit (what a baseline benchmark or a hook before the stop is for)
STOPPING = (Actions.SWITCH, Actions.RESTART)


class Targets:
    """What a switch switches to (sglang_switch's target)."""

    UNIT = "unit"          # the unit
    CAPTURE = "capture"    # back to the captured command (a rollback)


class Owners:
    """What serves a port, as the preflight finds it (its owner; None when nothing listens)."""

    ADHOC = "adhoc"        # a server outside the unit: started by hand, by a wrapper, or by another unit
    UNIT = "unit"          # the unit's own


class OutcomeStates:
    """The states of a switch's outcome file (switch.json), as its fields tell them."""

    CLAIMED = "claimed"    # a run claimed the switch under the lock; its worker has not reported yet
    RUNNING = "running"    # its worker runs the steps
    FINISHED = "finished"  # the steps ran, none failed
    FAILED = "failed"      # a step failed, the worker could not start, or it ended without finishing


DONE = (OutcomeStates.FINISHED, OutcomeStates.FAILED)  # the worker wrote its last


class AdoptActions:
    """What a run of sglang_adopt does (its result's action)."""

    NONE = Actions.NONE    # the unit serves the port, or the server is adopted and watched
    ADOPT = "adopt"        # the family moved into the scope, a wrapper loop stopped, the watcher started
    ATTACH = "attach"      # kin born since the adoption moved into the scope
    WATCH = "watch"        # the watcher started again
    FAIL = "fail"          # nothing can be adopted (the module fails, having touched nothing)


ADOPT_ACTIONS = (AdoptActions.NONE, AdoptActions.ADOPT, AdoptActions.ATTACH, AdoptActions.WATCH)


class Kinds:
    """The kinds of record in the port's state folder (cutover_record's kind, the record file's KIND-...json), and the
    action the record of an adoption names."""

    CUTOVER = "cutover"
    ROLLBACK = Actions.ROLLBACK
    ADOPT = AdoptActions.ADOPT


KINDS = (Kinds.CUTOVER, Kinds.ROLLBACK, Kinds.ADOPT)
