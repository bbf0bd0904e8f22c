"""The lock: one switch per port, claimed by one run and reported by the others."""
import json
import os
import subprocess
import sys

from ansible_collections.inferops.sglang.plugins.module_utils._switch import (
    launch as _switch_launch, lock as _switch_lock, outcome as _switch_outcome, worker as _switch_worker)

from tests.unit.conftest import COLLECTIONS, free_port
from ..conftest import Systemctl


def test_the_lock_allows_one_switch_per_port(tmp_path, monkeypatch):
    monkeypatch.setattr(_switch_lock, "LOCK_WAIT", 0.3)
    state, other = str(tmp_path / "state" / "1234"), str(tmp_path / "state" / "1235")
    assert not os.path.exists(state)
    fd = _switch_lock.take_lock(state)
    try:
        assert _switch_lock.take_lock(state) is None
        os.close(_switch_lock.take_lock(other))
        plan = dict(id="t2", action="start", port=1234, unit="sglang.service", unit_name="sglang",
                    state_dir=state, drain=1.0, release_strays=False, devices=[])
        outcome = _switch_worker.Worker(plan, run=Systemctl()).go()
        assert outcome["finished"] and "holds the lock" in outcome["error"] and outcome["steps"] == []
    finally:
        os.close(fd)
    os.close(_switch_lock.take_lock(state))


RACER = """
import json, os, sys, time
sys.path.insert(0, %r)
from ansible_collections.inferops.sglang.plugins.module_utils._switch import launch as _switch_launch, outcome as _switch_outcome
plan, go = json.loads(sys.argv[1]), float(sys.argv[2])
since = time.time()
while time.time() < go:
    pass
run_id, argv = _switch_launch.launch(plan, since)
print(json.dumps(dict(mine=plan["id"], reported=run_id, launched=argv is not None,
                      outcome=_switch_outcome.wait(plan["state_dir"], run_id, 60))))
"""


def test_two_runs_at_once_make_one_switch_and_both_report_it(tmp_path):
    """Two launches of one port at the same instant, each in its own process (an AWX retry, two operators): one
    claims the switch and runs it, under its own plan; the other reports that switch as its own result."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    calls = tmp_path / "systemctl.log"
    systemctl = bin_dir / "systemctl"  # systemd is not PID 1 here: a systemctl that logs and takes its time
    systemctl.write_text("#!/bin/sh\necho \"$@\" >> %s\n[ \"$1\" = start ] && sleep 0.5\nexit 0\n" % calls)
    systemctl.chmod(0o755)
    env = dict(os.environ, PATH="%s:%s" % (bin_dir, os.environ["PATH"]))
    state = str(tmp_path / "state" / "1234")
    go = repr(__import__("time").time() + 1.0)
    racers = [subprocess.Popen([sys.executable, "-c", RACER % COLLECTIONS, json.dumps(dict(
        id="run-%s" % n, action="start", port=free_port(), unit="sglang-%s.service" % n, unit_name="sglang-%s" % n,
        state_dir=state, drain=1.0, release_strays=False, devices=[str(tmp_path / "nvidia*")])), go],
        stdout=subprocess.PIPE, universal_newlines=True, env=env) for n in "ab"]
    answers = [json.loads(r.communicate(timeout=90)[0]) for r in racers]
    assert all(r.returncode == 0 for r in racers)
    winner = [a for a in answers if a["launched"]]
    assert len(winner) == 1, answers
    (won,) = winner
    assert [a["reported"] for a in answers] == [won["mine"]] * 2
    for a in answers:
        out = a["outcome"]
        assert out["id"] == won["mine"] and out["error"] is None and out["finished"], out
        assert [s["step"] for s in out["steps"]] == ["verify zero", "release GPUs", "start unit"]
    started = [line.split() for line in calls.read_text().splitlines() if line.startswith("start")]
    assert started == [["start", "--no-block", "sglang-%s.service" % won["mine"][-1]]]  # its own plan's unit
    # the plan (no record is kept from it) went with its worker
    assert sorted(os.listdir(state)) == ["switch.json", "switch.lock"]


def test_a_run_begun_before_a_switch_finished_reports_it_instead_of_starting_another(tmp_path):
    state = tmp_path / "state"
    state.mkdir()
    since = __import__("time").time()
    _switch_outcome.write_json(str(state / "switch.json"), {"id": "done", "began": since + 0.5, "finished": True, "error": None})
    plan = dict(id="late", action="switch", port=free_port(), unit="sglang.service", unit_name="sglang",
                state_dir=str(state), drain=1.0, release_strays=False, devices=[str(tmp_path / "nvidia*")])
    assert _switch_launch.launch(plan, since) == ("done", None)
    assert _switch_launch.launch(plan, since + 1.0)[0] == "late"  # one finished before this run began: a new switch


def test_a_claim_removes_earlier_switches_plans_and_payloads_and_a_kept_record_its_plan(tmp_path):
    state = tmp_path / "state"
    state.mkdir()
    for name in ("switch-plan-old.json", "switch-runtime-old.zip", "switch-runtime-older.zip", "capture.json"):
        (state / name).write_text("{}")
    _switch_outcome.write_json(str(state / "switch.json"), {"id": "old", "began": 1.0, "finished": True})
    plan = dict(id="new", action="start", state_dir=str(state))
    assert _switch_lock.claim(plan, since=__import__("time").time()) == ("new", True)
    assert sorted(os.listdir(str(state))) == ["capture.json", "switch-plan-new.json", "switch.json", "switch.lock"]
    _switch_outcome.write_json(str(state / "switch.json"), {"id": "new", "finished": True})
    claim = _switch_lock.RecordClaim(str(state), "new")
    with claim as mine:
        assert mine
        claim.done([])
    assert sorted(os.listdir(str(state))) == ["capture.json", "switch.json", "switch.lock"]
