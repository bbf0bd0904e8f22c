"""process_count's manager on real processes: what it counts, its wait for an expected count, check mode."""
import threading

import pytest

from ansible_collections.inferops.sglang.plugins.module_utils._manager_process_count import ProcessCount

from .conftest import Failed, ProcessModule as Module, exited
from . import programs


def test_process_count_counts_and_describes_the_zombies_and_the_missing(run, spawn):
    info = run(programs.ZOMBIE_PARENT)[1]
    parent, zombie = info["pids"]["parent"], info["pids"]["zombie"]
    missing = 4 * 10 ** 6  # above any pid_max
    r = exited(ProcessCount(Module(pid=[parent, zombie, missing], expect=1)))
    assert r["count"] == 1 and r["pids"] == [parent] and [x["pid"] for x in r["processes"]] == [parent]
    assert [z["pid"] for z in r["zombies"]] == [zombie] and r["zombies"][0]["state"] == "Z"
    assert r["missing"] == [missing] and r["refused"] == [] and not r["changed"]


def test_process_count_waits_for_the_expected_count(run, spawn):
    p = run(programs.HOLDER)[0]
    stopper = threading.Timer(0.3, p.kill)
    stopper.start()
    try:
        r = exited(ProcessCount(Module(pattern=spawn.marker, expect=0, timeout=60)))
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
    r = exited(ProcessCount(Module(check_mode=True, pattern=spawn.marker, expect=0, timeout=60)))
    assert r["count"] == 1 and r["pids"] == [pid] and r["elapsed"] < 30
    with pytest.raises(Failed, match="expect must be >= 0"):
        ProcessCount(Module(pattern=spawn.marker, expect=-1)).run()
