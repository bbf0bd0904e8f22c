"""sglang_adopt's decisions, from what is on the port and where its family is; a move that fails, whole or in
part, stops nothing; a unit that would fight the service refused or named before anything moves (real processes;
systemd's answers given)."""
import json
import subprocess
import sys
import time

import pytest

from ansible_collections.inferops.sglang.plugins.module_utils import _manager_sglang_adopt
from ansible_collections.inferops.sglang.plugins.module_utils._server import port_units as _port_units
from ansible_collections.inferops.sglang.plugins.module_utils._host import (
    procfs as _procfs, scope as _scope, signals as _signals)
from ansible_collections.inferops.sglang.plugins.module_utils._manager_sglang_adopt import SglangAdopt, decide
from tests.unit.conftest import free_port
from .conftest import Exited, FakeModule, Systemd, server_cmd, wait_listening

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


@pytest.mark.parametrize("mode", ["refuse", "replace"])
def test_a_unit_that_would_fight_the_service_is_refused_or_named_before_anything_moves(
        shell, tmp_path, monkeypatch, mode):
    """The operator's unit for the port, enabled beside a server run by hand: refused with existing_units=refuse
    (changed false, nothing asked of systemd); with replace, check mode says what the adoption would do to it."""
    port = free_port()
    shell("%s > s.log 2>&1 & wait" % server_cmd(port))
    (pid,) = wait_listening(port)
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc" / "kimi.service").write_text("[Service]\nExecStart=/v/sglang serve --port %d\n" % port)
    monkeypatch.setattr(_port_units, "UNIT_DIRS", (str(tmp_path / "etc"),))
    systemd = Systemd(**{"kimi.service": dict(UnitFileState="enabled")})

    class Host(FakeModule):
        check_mode = mode == "replace"

        def run_command(self, argv):
            return systemd(argv)

    mgr = SglangAdopt(Host(port=port, unit="s", state_dir=str(tmp_path / "state"), drain=5.0, devices=[], redact=[],
                           existing_units=mode, capture=json.dumps({"argv": ["x"]})))
    with pytest.raises(Exited) as e:
        mgr.run()
    out = e.value.args[0]
    (kimi,) = out["units"]
    if mode == "refuse":
        assert out["failed"] and out["changed"] is False
        assert out["msg"].startswith("nothing was touched: existing_units is refuse, and a unit that could serve port")
    else:
        assert kimi["plan"].endswith(": replace: backed up, disabled") and out["changed"] and out["action"] == "adopt"
    assert systemd.calls == [] and not (tmp_path / "state").exists() and _procfs.is_alive(
        (pid, _procfs.starttime(pid)))
