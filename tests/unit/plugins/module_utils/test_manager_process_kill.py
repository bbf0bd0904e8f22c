"""process_kill's manager on real processes: the tree it stops and how, check mode, a stop that fails, the inputs it
refuses."""
import pytest

from ansible_collections.inferops.sglang.plugins.module_utils._manager_process_kill import ProcessKill

from .conftest import Failed, ProcessModule as Module, alive, exited
from . import programs


def test_process_kill_stops_the_tree_and_escalates_for_the_child_that_ignores_sigterm(run, spawn):
    p, info = run(programs.TREE_WITH_STUBBORN_CHILD)
    parent, child = info["pids"]["parent"], info["pids"]["child"]
    r = exited(ProcessKill(Module(pattern=spawn.marker + " .*ready", grace=0.5)))
    assert not r.get("failed") and r["changed"] and r["escalated"] and r["remaining"] == [] and r["stuck"] == []
    rows = dict((t["pid"], t) for t in r["targets"])
    assert sorted(rows) == sorted([parent, child])
    assert rows[parent]["signals"] == ["TERM"] and rows[parent]["ended_by"] == "signal"
    assert rows[child]["signals"] == ["TERM", "KILL"] and rows[child]["ended_by"] == "escalation"
    assert r["msg"] == "stopped 2 process(es), escalated to KILL" and r["elapsed"] >= 0.5
    assert p.wait(timeout=10) == -15 and not alive(child)


def test_process_kill_in_check_mode_says_what_it_would_send_and_sends_nothing(run, spawn):
    info = run(programs.TREE_WITH_STUBBORN_CHILD)[1]
    pids = sorted(info["pids"].values())
    for mode, count in (("all", 2), ("mixed", 1)):
        r = exited(ProcessKill(Module(check_mode=True, diff=True, pattern=spawn.marker + " .*ready", mode=mode)))
        assert r["changed"] and r["msg"] == "would send TERM to %d process(es)" % count
        assert sorted(t["pid"] for t in r["targets"]) == pids and "signals" not in r["targets"][0]
        assert sorted(int(line.split()[0]) for line in r["diff"]["before"].splitlines()) == pids
        assert r["diff"]["after"] == ""
    assert alive(*pids) == pids


def test_process_kill_without_a_target_changes_nothing(spawn):
    r = exited(ProcessKill(Module(pattern=spawn.marker + " nothing runs this")))
    assert r == dict(changed=False, targets=[], escalated=False, remaining=[], stuck=[], refused=[], zombies=[],
                     missing=[], msg="no process to stop", elapsed=r["elapsed"])


def test_process_kill_that_cannot_stop_fails_with_what_is_left_and_its_secret_hidden(run, spawn):
    """Escalating with the signal the child ignores leaves it running: the failure names it, redacted."""
    info = run(programs.TREE_WITH_STUBBORN_CHILD)[1]
    child = info["pids"]["child"]
    with pytest.raises(Failed) as e:
        ProcessKill(Module(pid=[child], escalate="TERM", grace=0.2, redact=["-c"])).run()
    r = e.value.args[0]
    assert r["failed"] and r["changed"] and r["escalated"] and r["remaining"] == [child]
    assert r["msg"].startswith("1 process(es) still alive after TERM: %d (" % child)
    assert "-c ********" in r["msg"] and "import" not in r["msg"] and r["targets"][0]["ended_by"] == "still running"
    assert r["targets"][0]["signals"] == ["TERM", "TERM"] and alive(child) == [child]


@pytest.mark.parametrize("params, message", [
    (dict(signal="NOPE"), "unknown signal 'NOPE': use a name such as TERM, INT, KILL or a number"),
    (dict(escalate="99"), "use a name such as TERM, INT, KILL or a number"),
    (dict(grace=-1), "grace must be >= 0 seconds"),
    (dict(pattern=".*"), "matches every process"),
    (dict(max_targets=1, tree=True), "2 processes would be hit, more than max_targets=1"),
])
def test_process_kill_refuses_bad_input_and_stops_nothing(run, spawn, params, message):
    info = run(programs.TREE_WITH_STUBBORN_CHILD)[1]
    with pytest.raises(Failed, match=message):
        ProcessKill(Module(**dict(dict(pattern=spawn.marker + " .*ready"), **params))).run()
    assert alive(*info["pids"].values()) == list(info["pids"].values())
