"""sglang_adopt's decisions, from what is on the port and where its family is; a move that fails, whole or in
part, stops nothing (real processes; systemd's answers given)."""
import subprocess
import sys
import time

import pytest

from ansible_collections.inferops.sglang.plugins.module_utils import _manager_sglang_adopt, _procfs, _scope, _signals
from ansible_collections.inferops.sglang.plugins.module_utils._manager_sglang_adopt import SglangAdopt, decide

SCOPE = "s-adopted.scope"


def insp(owner="adhoc", problems=(), family=(10, 11, 12)):
    return {"port": 30000, "unit": "s.service", "owner": owner, "problems": list(problems),
            "server": {"pid": family[0]} if owner else None, "family": [{"pid": p} for p in family]}


def test_nothing_listens_fails():
    assert decide(insp(owner=None, family=()), {}, False, SCOPE)[0] == "fail"


def test_the_service_serves_nothing_to_do():
    assert decide(insp(owner="unit"), {}, False, SCOPE) == ("none", "s.service serves port 30000: nothing to adopt")


def test_problems_fail_before_anything():
    action, why = decide(insp(problems=["pid 9 listens on port 30000 and is not of the server's family"]),
                         {10: "session-1.scope"}, False, SCOPE)
    assert action == "fail" and why.startswith("nothing was touched: pid 9")


def test_a_server_outside_the_scope_is_adopted():
    where = {10: "session-1.scope", 11: "session-1.scope", 12: None}
    action, why = decide(insp(), where, False, SCOPE)
    assert action == "adopt" and "3 process(es)" in why


def test_kin_born_since_are_attached():
    assert decide(insp(), {10: SCOPE, 11: SCOPE, 12: "session-1.scope"}, True, SCOPE)[0] == "attach"


def test_a_lost_watcher_is_started_again():
    assert decide(insp(), {10: SCOPE, 11: SCOPE, 12: SCOPE}, False, SCOPE)[0] == "watch"


def test_adopted_and_watched_nothing_to_do():
    assert decide(insp(), {10: SCOPE, 11: SCOPE, 12: SCOPE}, True, SCOPE)[0] == "none"


class Module:
    """What the manager uses of AnsibleModule; systemd's answers are given (busctl is not run)."""

    check_mode = False

    def __init__(self, answer):
        self.params = dict(port=30000, unit="s", state_dir="/nonexistent", drain=5.0, devices=[], redact=[])
        self.answer = answer
        self.calls = []

    def run_command(self, argv):
        self.calls.append(argv)
        return self.answer


@pytest.fixture()
def family():
    """A real process tree: a server and its child, as inspect reports them."""
    p = subprocess.Popen([sys.executable, "-c", "import subprocess, sys, time\n"
                          "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\ntime.sleep(60)"])
    time.sleep(0.3)
    procs = _procfs.snapshot()
    pids = [p.pid] + _procfs.descendants(procs, [p.pid])
    rows = [{"pid": pid, "starttime": procs[pid].starttime, "state": procs[pid].state} for pid in pids]
    yield {"port": 30000, "unit": "s.service", "owner": "adhoc", "problems": [], "wrapper": None,
           "server": dict(rows[0]), "family": rows}
    for pid in reversed(pids):
        _signals.send((pid, procs[pid].starttime), 9)
    p.wait()


def adopt(module):
    mgr = SglangAdopt(module)
    mgr.service, (mgr.scope, mgr.watcher) = "s.service", _scope.names("s")
    return mgr


def test_a_refused_scope_moves_nothing_and_stops_nothing(family):
    mgr = adopt(Module((1, "", "Call failed: Unit s-adopted.scope already exists.")))
    with pytest.raises(_scope.ScopeError) as e:
        mgr.move(family)
    assert "Nothing was moved" in str(e.value) and "already exists" in str(e.value)
    call = mgr.module.calls[0]
    i = call.index("PIDs")
    assert call[i:i + 3 + len(family["family"])] == ["PIDs", "au", str(len(family["family"]))] + [
        str(f["pid"]) for f in family["family"]], "the whole family in the one call"
    assert all(_procfs.is_alive((f["pid"], f["starttime"])) for f in family["family"])


def test_a_partial_move_says_where_each_process_is_and_stops_nothing(family, monkeypatch):
    monkeypatch.setattr(_manager_sglang_adopt, "SETTLE", 0.2)
    mgr = adopt(Module((0, 'o "/org/freedesktop/systemd1/job/7"\n', "")))  # systemd said yes; nothing moved
    with pytest.raises(_scope.ScopeError) as e:
        mgr.move(family)
    assert "was partial" in str(e.value) and "Nothing was stopped" in str(e.value)
    assert all("%d in " % f["pid"] in str(e.value) for f in family["family"])
    assert all(_procfs.is_alive((f["pid"], f["starttime"])) for f in family["family"])
