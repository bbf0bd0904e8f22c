"""The switch's outcome file, and the wait on it."""
import os
import subprocess
import sys

import pytest

from ansible_collections.inferops.sglang.plugins.module_utils._host import procfs as _procfs
from ansible_collections.inferops.sglang.plugins.module_utils._switch import outcome as _switch_outcome


def test_wait_notices_a_worker_that_died(tmp_path):
    state = tmp_path / "state"
    state.mkdir()
    gone = subprocess.Popen(["true"])
    gone.wait()
    _switch_outcome.write_json(str(state / "switch.json"), {"id": "t4", "pid": gone.pid, "starttime": 1, "finished": False})
    out = _switch_outcome.wait(str(state), "t4", 5)
    assert "ended without finishing" in out["error"]
    with pytest.raises(TimeoutError):
        _switch_outcome.wait(str(state), "other", 0.3)


def test_a_worker_that_finishes_between_the_read_and_the_look_at_its_life_finished(tmp_path, monkeypatch):
    """The wait reads the outcome, then looks whether its process lives: a worker that wrote its last word and ended
    in between finished, it did not end without finishing (a rollback on a busy host was reported failed so)."""
    state = tmp_path / "state"
    state.mkdir()
    where = str(state / "switch.json")
    worker = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    running = {"id": "t11", "pid": worker.pid, "starttime": _procfs.starttime(worker.pid), "finished": False,
               "steps": [{"step": "start captured command"}]}
    _switch_outcome.write_json(where, running)
    is_alive = _procfs.is_alive

    def look(proc):  # the worker's last word and its end fall between the wait's read and this look
        if worker.poll() is None:
            _switch_outcome.write_json(where, dict(running, finished=True, started_at=1.0))
            worker.stdin.close()
            worker.wait()
        return is_alive(proc)

    monkeypatch.setattr(_procfs, "is_alive", look)
    out = _switch_outcome.wait(str(state), "t11", 5)
    assert worker.returncode == 0 and out["finished"] and out["started_at"] == 1.0 and not out.get("error")


STARTED = {"steps": [{"step": "start unit"}], "started_at": 1.0}


@pytest.mark.parametrize("outcome, elapsed, log, says", [
    ({}, 3.2, "", "stopping, 3 s"),
    (None, 3.2, "", "stopping, 3 s"),  # before the worker's first word
    ({"steps": [{"step": "stop server"}]}, 12, "old log", "stopping (stop server done), 12 s"),
    (STARTED, 40, "a\nLoad weight begin. avail mem=70 GB", "loading, 40 s: Load weight begin. avail mem=70 GB"),
    (STARTED, 60, "Capture cuda graph begin.", "loading, 60 s: Capture cuda graph begin."),
    (STARTED, 70, "Uvicorn running on http://127.0.0.1:30000", "warm-up, 70 s: Uvicorn running on http://127.0.0.1:30000"),
    (STARTED, 95, "The server is fired up and ready to roll!",
     "verifying, 95 s: The server is fired up and ready to roll!"),
    (STARTED, 41, "x" * 300, "loading, 41 s: " + "x" * 200),
])
def test_the_progress_line_says_the_phase_the_seconds_and_the_log(outcome, elapsed, log, says):
    assert _switch_outcome.progress_line(outcome, elapsed, log) == says


def test_the_log_is_masked_before_it_is_cut():
    """A secret across the 200th character: masked whole, no part of it left."""
    from ansible_collections.inferops.sglang.plugins.module_utils._host.redact import MASK, Redactor
    line = "y" * 195 + " sk-secret-tail"
    said = _switch_outcome.progress_line(STARTED, 41, line, Redactor(values=["sk-secret-tail"]))
    assert said == "loading, 41 s: " + ("y" * 195 + " " + MASK)[:200] and "sk-" not in said


def test_wait_ticks_with_the_outcome_as_it_stands(tmp_path):
    state = tmp_path / "state"
    state.mkdir()
    seen = []
    _switch_outcome.write_json(str(state / "switch.json"), {"id": "t5", "finished": True, "error": None})
    assert _switch_outcome.wait(str(state), "t5", 5, tick=seen.append)["id"] == "t5"
    assert seen == [{"id": "t5", "finished": True, "error": None}]
    seen = []
    with pytest.raises(TimeoutError):
        _switch_outcome.wait(str(state), "other", 0.3, tick=seen.append)
    assert seen and set(map(repr, seen)) == {"None"}  # another switch's outcome is none of this one's


def test_a_claim_whose_process_never_reports_is_given_up_and_its_late_start_switches_nothing(tmp_path, monkeypatch):
    """A claimed switch for which no process was said to start within LAUNCH_WAIT: the wait raises NeverReported, the
    run gives the claim up (lock.unclaim), and the process, should it start after all, leaves the outcome as that run
    said."""
    from ansible_collections.inferops.sglang.plugins.module_utils._switch import (
        lock as _switch_lock, worker as _switch_worker)
    from ansible_collections.inferops.sglang.plugins.module_utils._manager_sglang_switch import SglangSwitch
    from ..conftest import Failed, Systemctl
    from ..test_manager_sglang_switch import Module
    state = tmp_path / "state"
    state.mkdir()
    plan = dict(id="t9", action="switch", port=1, unit="sglang.service", unit_name="sglang", state_dir=str(state),
                drain=1, release_strays=False, devices=[str(tmp_path / "nvidia*")])
    _switch_lock.claim(plan, None)
    monkeypatch.setattr(_switch_outcome, "LAUNCH_WAIT", 0.3)
    with pytest.raises(_switch_outcome.NeverReported):
        _switch_outcome.wait(str(state), "t9", 5)
    # the module's wait: it fails with that message and gives the claim up
    mgr = SglangSwitch(Module())
    mgr.state_dir, mgr.run_id, mgr.timeout, mgr.result, mgr.action = str(state), "t9", 5, {}, "switch"
    mgr.progress, mgr.told_at = None, None
    with pytest.raises(Failed) as e:
        mgr.wait_switch()
    assert e.value.args[0]["msg"].startswith("the switch process never reported")
    given_up = _switch_outcome.read_json(str(state / "switch.json"))
    assert given_up["finished"] and given_up["error"].startswith("the switch process never reported")
    systemctl = Systemctl()
    assert _switch_worker.Worker(plan, run=systemctl).go() == given_up
    assert systemctl.calls == [] and _switch_outcome.read_json(str(state / "switch.json")) == given_up


def test_a_claim_is_followed_by_its_process_life_not_by_a_window(tmp_path, monkeypatch):
    """On a starved host the worker may take longer than any window to write its first word: while the process
    started for the claim lives, the claim goes on (for the wait and for other runs); once it ended without a word,
    the wait gives up at once."""
    from ansible_collections.inferops.sglang.plugins.module_utils._switch import lock as _switch_lock
    state = tmp_path / "state"
    state.mkdir()
    plan = dict(id="t10", action="switch", state_dir=str(state))
    _switch_lock.claim(plan, None)
    monkeypatch.setattr(_switch_outcome, "LAUNCH_WAIT", 0.3)
    silent = subprocess.Popen(["sleep", "30"])
    try:
        _switch_lock.worker_started(str(state), "t10", silent.pid)
        claimed = _switch_outcome.read_json(str(state / "switch.json"))
        assert _switch_outcome.worker(claimed) == (silent.pid, _procfs.starttime(silent.pid))
        with pytest.raises(TimeoutError) as e:  # 1.5 s of silence, five LAUNCH_WAITs: not given up
            _switch_outcome.wait(str(state), "t10", 1.5)
        assert not isinstance(e.value, _switch_outcome.NeverReported)
        assert _switch_outcome.pending(claimed) and _switch_outcome.current(str(state)) == "t10"
    finally:
        silent.kill()
        silent.wait()
    assert not _switch_outcome.pending(claimed) and _switch_outcome.current(str(state)) is None
    monkeypatch.setattr(_switch_outcome, "LAUNCH_WAIT", 60.0)
    with pytest.raises(_switch_outcome.NeverReported) as e:
        _switch_outcome.wait(str(state), "t10", 30)
    assert str(e.value).startswith("the switch process %d ended without reporting" % silent.pid)


def test_the_started_process_is_said_only_while_the_switch_is_claimed(tmp_path):
    """lock.worker_started: written into a claimed outcome; an outcome its process already wrote is left as it is; a process
    that ended before it was seen (pid 0: the transient unit collected) makes a claim no longer pending."""
    from ansible_collections.inferops.sglang.plugins.module_utils._switch import lock as _switch_lock
    state = tmp_path / "state"
    state.mkdir()
    _switch_lock.claim(dict(id="t11", action="switch", state_dir=str(state)), None)
    _switch_lock.worker_started(str(state), "t11", 0)
    claimed = _switch_outcome.read_json(str(state / "switch.json"))
    assert claimed["worker"] == {"pid": None, "starttime": None} and not _switch_outcome.pending(claimed)
    running = dict(claimed, pid=os.getpid(), starttime=_procfs.starttime(os.getpid()), worker=None)
    _switch_outcome.write_json(str(state / "switch.json"), running)
    _switch_lock.worker_started(str(state), "t11", os.getpid())
    assert _switch_outcome.read_json(str(state / "switch.json")) == running
