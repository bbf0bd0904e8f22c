"""process_kill, process_count and gpu_release's managers on real processes: what they select, stop and count, what
they report, check mode, and the inputs they refuse."""
import threading

import pytest

from ansible_collections.inferops.sglang.plugins.module_utils import _procfs
from ansible_collections.inferops.sglang.plugins.module_utils._manager_processes import GpuRelease, ProcessCount, ProcessKill

from .conftest import Exited, Failed, FakeModule, globs
from . import programs


class Module(FakeModule):
    """What the three managers use of AnsibleModule."""

    defaults = dict(state="released", gpus=None, timeout=10.0, signal="TERM", escalate="KILL", grace=5.0, pid=None,
                    pattern=None, user=None, exclude=[], max_targets=64, protect=[], unprotect=[], redact=[], tree=True,
                    mode="all", expect=None)


def result_of(manager):
    with pytest.raises(Exited) as e:
        manager.run()
    return e.value.args[0]


def alive(*pids):
    return [pid for pid in pids if _procfs.read(pid) is not None and not _procfs.read(pid).is_zombie]


def test_process_kill_stops_the_tree_and_escalates_for_the_child_that_ignores_sigterm(run, spawn):
    p, info = run(programs.TREE_WITH_STUBBORN_CHILD)
    parent, child = info["pids"]["parent"], info["pids"]["child"]
    r = result_of(ProcessKill(Module(pattern=spawn.marker + " .*ready", grace=0.5)))
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
        r = result_of(ProcessKill(Module(check_mode=True, diff=True, pattern=spawn.marker + " .*ready", mode=mode)))
        assert r["changed"] and r["msg"] == "would send TERM to %d process(es)" % count
        assert sorted(t["pid"] for t in r["targets"]) == pids and "signals" not in r["targets"][0]
        assert sorted(int(line.split()[0]) for line in r["diff"]["before"].splitlines()) == pids
        assert r["diff"]["after"] == ""
    assert alive(*pids) == pids


def test_process_kill_without_a_target_changes_nothing(spawn):
    r = result_of(ProcessKill(Module(pattern=spawn.marker + " nothing runs this")))
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


def test_process_count_counts_and_describes_the_zombies_and_the_missing(run, spawn):
    info = run(programs.ZOMBIE_PARENT)[1]
    parent, zombie = info["pids"]["parent"], info["pids"]["zombie"]
    missing = 4 * 10 ** 6  # above any pid_max
    r = result_of(ProcessCount(Module(pid=[parent, zombie, missing], expect=1)))
    assert r["count"] == 1 and r["pids"] == [parent] and [x["pid"] for x in r["processes"]] == [parent]
    assert [z["pid"] for z in r["zombies"]] == [zombie] and r["zombies"][0]["state"] == "Z"
    assert r["missing"] == [missing] and r["refused"] == [] and not r["changed"]


def test_process_count_waits_for_the_expected_count(run, spawn):
    p = run(programs.HOLDER)[0]
    stopper = threading.Timer(0.3, p.kill)
    stopper.start()
    try:
        r = result_of(ProcessCount(Module(pattern=spawn.marker, expect=0, timeout=60)))
    finally:
        stopper.join()
    assert r["count"] == 0 and r["pids"] == [] and r["elapsed"] >= 0.3


def test_process_count_fails_once_its_time_is_out_and_check_mode_does_not_wait(run, spawn):
    info = run(programs.HOLDER)[1]
    pid = info["pids"]["holder"]
    with pytest.raises(Failed) as e:
        ProcessCount(Module(pattern=spawn.marker, expect=0, timeout=0.3)).run()
    r = e.value.args[0]
    assert r["msg"].startswith("expected 0 matching process(es), found 1 after 0.3 s: %d " % pid)
    assert r["count"] == 1 and r["elapsed"] >= 0.3
    r = result_of(ProcessCount(Module(check_mode=True, pattern=spawn.marker, expect=0, timeout=60)))
    assert r["count"] == 1 and r["pids"] == [pid] and r["elapsed"] < 30
    with pytest.raises(Failed, match="expect must be >= 0"):
        ProcessCount(Module(pattern=spawn.marker, expect=-1)).run()


def test_gpu_release_query_and_check_mode_touch_nothing(run, devices, decoy, monkeypatch):
    monkeypatch.setenv("PATH", "/usr/bin:/bin")  # no nvidia-smi: the device files alone decide
    holder = run(programs.HOLDER, str(devices / "nvidia0"), str(devices / "nvidiactl"))[0]
    ctl_only = run(programs.HOLDER, str(devices / "nvidiactl"))[0]
    r = result_of(GpuRelease(Module(state="query", devices=globs(devices))))
    assert not r["changed"] and r["msg"] == "3 holder(s), 1 target(s)" and not r["nvidia_smi"]
    assert r["nvidia_smi_note"].startswith("nvidia-smi not found") and "before" not in r
    assert [t["pid"] for t in r["targets"]] == [holder.pid] and [s["pid"] for s in r["shared_only"]] == [ctl_only.pid]
    assert [(x["pid"], x["reason"]) for x in r["protected"]] == [(decoy.pid, "protected (nvidia-persistenced)")]
    r = result_of(GpuRelease(Module(check_mode=True, diff=True, devices=globs(devices))))
    assert r["changed"] and r["msg"] == "would release 1 process(es)" and "released" not in r
    assert r["diff"]["before"].startswith("%d " % holder.pid) and str(devices / "nvidia0") in r["diff"]["before"]
    assert holder.poll() is None and ctl_only.poll() is None and decoy.poll() is None
    r = result_of(GpuRelease(Module(devices=globs(devices), grace=5)))
    assert r["changed"] and [x["pid"] for x in r["released"]] == [holder.pid] and r["msg"] == "released 1 process(es)"
    assert "memory" not in r and holder.wait(timeout=10) == -15 and ctl_only.poll() is None and decoy.poll() is None


def test_gpu_release_refuses_negative_gpus_and_a_failing_nvidia_smi(run, devices, tmp_path, monkeypatch):
    holder = run(programs.HOLDER, str(devices / "nvidia0"))[0]
    with pytest.raises(Failed, match=r"gpus are indices: 0, 1, \.\.\."):
        GpuRelease(Module(devices=globs(devices), gpus=[0, -1])).run()
    smi = tmp_path / "smi-bin" / "nvidia-smi"
    smi.parent.mkdir()
    smi.write_text("#!/bin/sh\necho 'NVIDIA-SMI has failed because it could not communicate' >&2\nexit 9\n")
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", "%s:/usr/bin:/bin" % smi.parent)
    with pytest.raises(Failed) as e:
        GpuRelease(Module(devices=globs(devices))).run()
    r = e.value.args[0]
    assert r["msg"] == "reading nvidia-smi failed: nvidia-smi failed (rc 9): NVIDIA-SMI has failed because it could not communicate"
    assert r["nvidia_smi"] and [t["pid"] for t in r["targets"]] == [holder.pid] and not r["changed"]
    assert holder.poll() is None, "nothing was stopped"


def test_gpu_release_returns_once_the_memory_is_back(run, devices, lagging_smi):
    holder = run(programs.HOLDER, str(devices / "nvidia0"), str(devices / "nvidiactl"))[0]
    d = lagging_smi(holder.pid, 3)
    with pytest.raises(Exited) as e:
        GpuRelease(Module(devices=globs(devices))).run()
    r = e.value.args[0]
    assert not r.get("failed"), r["msg"]
    assert [t["pid"] for t in r["released"]] == [holder.pid]
    assert r["before"]["compute_apps"][1] == {"pid": holder.pid, "name": "python3", "used_memory_mib": 4614, "gpu": 0}
    assert int((d / "gone").read_text()) >= 4, "returned before memory.used dropped"
    assert r["after"]["gpus"] == [{"index": 0, "memory_used_mib": 20015}]
    assert r["memory"]["gpus"] == [{"index": 0, "held_mib": 4614, "dropped_mib": 4625, "memory_used_mib": 20015}]
    assert 0 < r["memory"]["unlisted"] < r["memory"]["waited"] <= r["memory_released_after"]
    assert r["memory"]["readings"] >= 4


def test_gpu_release_fails_when_the_memory_is_not_back_in_time(run, devices, lagging_smi):
    holder = run(programs.HOLDER, str(devices / "nvidia0"))[0]
    lagging_smi(holder.pid, 10 ** 6)
    with pytest.raises(Exited) as e:
        GpuRelease(Module(devices=globs(devices), timeout=0.5)).run()
    r = e.value.args[0]
    assert r["failed"] and r["changed"] and holder.poll() is not None
    assert r["msg"] == ("GPU memory of released processes is not back after 0.5 s: "
                        "GPU 0 dropped 0 of the 4614 MiB they held")
