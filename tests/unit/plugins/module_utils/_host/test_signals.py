"""Stopping real processes: escalation, mixed mode, pid reuse, event-driven waits."""
import signal
import time

import pytest

from ansible_collections.inferops.sglang.plugins.module_utils._host import procfs as _procfs, signals as _signals
from ansible_collections.inferops.sglang.plugins.module_utils._host.selection import Selector

from .. import programs


def test_signal_names():
    assert _signals.signum("TERM") == signal.SIGTERM
    assert _signals.signum("sigkill") == signal.SIGKILL
    assert _signals.signum("2") == signal.SIGINT
    for bad in ("FOO", "999"):
        with pytest.raises(ValueError):
            _signals.signum(bad)


def test_all_mode_escalates_the_stubborn_child(run, spawn):
    p, info = run(programs.TREE_WITH_STUBBORN_CHILD)
    sel = Selector(pattern=spawn.marker).select(tree=True)
    t0 = time.monotonic()
    res = _signals.stop(sel.targets, sig=signal.SIGTERM, escalate=signal.SIGKILL, grace=0.5)
    took = time.monotonic() - t0
    parent, child = info["pids"]["parent"], info["pids"]["child"]
    assert res.ended_by[parent] == "signal" and res.sent[parent] == ["TERM"]
    assert res.ended_by[child] == "escalation" and res.sent[child] == ["TERM", "KILL"]
    assert res.escalated and res.remaining == [] and res.stuck == []
    assert 0.5 <= took < 2.0
    assert not _procfs.is_alive((child, 0)) or _procfs.starttime(child) is None


def test_wait_returns_as_soon_as_targets_exit(run, spawn):
    p, info = run(programs.HOLDER)
    t0 = time.monotonic()
    res = _signals.stop(Selector(pid=[p.pid]).select().targets, grace=30)
    assert time.monotonic() - t0 < 0.5, "no fixed sleeps: the wait ends when the process is gone"
    assert res.ended_by[p.pid] == "signal" and not res.escalated


def test_mixed_mode_signals_roots_only_then_escalates(run, spawn):
    p, info = run(programs.TREE_WITH_STUBBORN_CHILD)
    sel = Selector(pattern=spawn.marker + " .*ready").select(tree=True)
    parent, child = info["pids"]["parent"], info["pids"]["child"]
    assert [r.pid for r in sel.roots()] == [parent]
    res = _signals.stop(sel.targets, roots=sel.roots(), mode="mixed", grace=0.3)
    assert res.sent[parent] == ["TERM"]
    assert res.sent[child] == ["KILL"], "mixed mode sends the first signal to the roots only"
    assert res.ended_by[child] == "escalation" and res.remaining == []


def test_reused_pid_is_never_signalled(run, spawn):
    p, info = run(programs.HOLDER)
    real = _procfs.read(p.pid)
    recorded = (real.pid, real.starttime - 1)  # what we recorded belonged to an earlier process at this pid
    assert _signals.send(recorded, signal.SIGKILL) is False
    time.sleep(0.1)
    assert _procfs.is_alive(real.identity), "the process now at the recorded pid lives"
    fake = _procfs.Process(real.pid, real.ppid, real.pgid, real.sid, real.state, real.starttime - 1, 0, "x", [], 0)
    res = _signals.stop([fake], grace=0.2)
    assert res.ended_by[real.pid] == "gone before" and res.sent == {}
    assert _procfs.is_alive(real.identity)


def test_zombie_counts_as_exited(run, spawn):
    p, info = run(programs.ZOMBIE_PARENT)
    z = info["pids"]["zombie"]
    assert not _procfs.is_alive((z, _procfs.starttime(z)))
    assert _signals.wait_gone([(z, _procfs.starttime(z))], 0) == []
