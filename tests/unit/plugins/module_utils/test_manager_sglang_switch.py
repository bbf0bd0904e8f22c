"""sglang_switch's wait and record, after the switch: against the SGLang double on loopback (the captured command
started again), a process that dies, and the record it keeps. The detached switch itself is test_switch_worker.py's."""
import json
import socket
import subprocess
import sys
import threading
import time

import pytest

from ansible_collections.inferops.sglang.plugins.module_utils import _discover, _files, _procfs, _switch_outcome
from ansible_collections.inferops.sglang.plugins.module_utils._manager_sglang_switch import SglangSwitch
from tests.unit.conftest import free_port
from .conftest import Failed, FakeModule, installed_double, server_cmd, wait_listening


class Module(FakeModule):
    """What the manager uses of AnsibleModule."""

    defaults = dict(redact=[], record=None, wait=None)


def wait(url, **kw):
    return dict(dict(url=url, api_key=None, model=None, generate=False, timeout=20.0), **kw)


STEPS = [{"step": "stop server", "seconds": 0.2}, {"step": "start captured command", "seconds": 0.01}]


def finished(state_dir, **outcome):
    """The outcome file of a finished switch r1, as its worker leaves it."""
    outcome = dict(dict(id="r1", finished=True, error=None), **outcome)
    _switch_outcome.write_json(str(state_dir / "switch.json"), outcome)
    return outcome


def test_the_captured_command_serves_and_the_rollback_is_recorded(server, tmp_path):  # noqa: F811
    p = server()
    mgr = SglangSwitch(Module(wait=wait(p.url, generate=True),
                              record=dict(dir=str(tmp_path / "30000"), data={"host": "h", "port": 30000,
                                                                             "failure": "unit failed"})))
    result = dict(msg="rollback: stop server 0.20 s", steps=STEPS, downtime=0.21, pid_started=p.pid, action="rollback")
    outcome = finished(tmp_path, pid_started=p.pid, began=1796058514.5)
    mgr.serve(result, outcome, "sglang.service", str(tmp_path), back=True)
    assert result["ready_after"] > 1.0 and result["model"] and result["generated"]
    assert result["msg"].startswith("rollback: stop server 0.20 s; the captured command ready after")
    given = dict(mgr.params["record"], family=[], gpus=[])
    mgr.keep_record(result, outcome, given, True, str(tmp_path))
    record = json.loads((tmp_path / "30000" / "last.json").read_text())
    assert record == dict(host="h", port=30000, failure="unit failed", time=1796058514.5, action="rollback",
                          rollback_steps=STEPS, rollback_downtime_sec=0.21, pid_started=p.pid,
                          ready_after_sec=result["ready_after"])
    assert (tmp_path / "30000" / "rollback-20261130T170834Z.json").exists()
    assert "# Rollback of port 30000 on h" in (tmp_path / "30000" / "last.md").read_text()
    assert sorted(result["record_written"]) == sorted(str(tmp_path / "30000" / n) for n in (
        "last.json", "last.md", "rollback-20261130T170834Z.json"))


def test_what_the_switch_started_dies_and_the_failure_says_so_with_the_steps_and_its_log(tmp_path):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    log = tmp_path / "sglang.log"
    log.write_text("loading\nRuntimeError: CUDA out of memory\n")
    (tmp_path / "capture.json").write_text(json.dumps({"stdout": str(log)}))
    mgr = SglangSwitch(Module(wait=wait("http://127.0.0.1:9", timeout=30.0),
                              record=dict(dir=str(tmp_path / "rec"), data={"host": "h"})))
    result = dict(msg="rollback: stop server 0.20 s", steps=STEPS, action="rollback")
    with pytest.raises(Failed) as e:
        mgr.serve(result, dict(pid_started=dead.pid, began=1796058514.5), "sglang.service", str(tmp_path), back=True)
    out = e.value.args[0]
    assert out["wait_failed"] and out["steps"] == STEPS and out["log_lines"][-1] == "RuntimeError: CUDA out of memory"
    assert out["msg"] == ("rollback: stop server 0.20 s; then the captured command did not serve: pid %d exited"
                          % dead.pid)
    assert out["wait_seconds"] < 5 and not (tmp_path / "rec").exists()


def test_the_cutover_record_is_completed_on_the_host(tmp_path):
    mgr = SglangSwitch(Module(record=dict(dir=str(tmp_path), data={"host": "h", "port": 30000, "old": {"pid": 7},
                                                                   "stages_sec": {"discover": 0.4}})))
    result = dict(msg="switch", action="switch", steps=STEPS, downtime=0.3, ready_after=11.0, wait_seconds=11.2,
                  model="m", generated="OK", sglang_version="0.5.23", elapsed=1.5,
                  installed=dict(seconds=0.5, unit_path="/etc/systemd/system/s.service", checksum="ab",
                                 environment_names=["A"]))
    given = dict(mgr.params["record"], family=[7, 8], gpus=[0, 1], sglang_version="0.5.23", installed=result.pop("installed"))
    mgr.keep_record(result, finished(tmp_path, action="switch", began=1796058514.5), given, False, str(tmp_path))
    rec = json.loads((tmp_path / "last.json").read_text())
    assert rec["old"] == {"pid": 7, "family": [7, 8]} and rec["gpus"] == [0, 1] and rec["generated"] is True
    assert rec["stages_sec"] == {"discover": 0.4, "unit": 0.5, "switch": 1.0, "verify": 11.2}
    assert rec["downtime_until_ready_sec"] == 11.3 and rec["load_sec"] == 11.0 and rec["model"] == "m"
    unit = (rec["unit_path"], rec["unit_checksum"], rec["environment_names"])
    assert unit == ("/etc/systemd/system/s.service", "ab", ["A"])
    assert result["report"].startswith("# Cutover of port 30000 on h") and (tmp_path / "cutover-20261130T170834Z.json").exists()


def test_the_record_of_a_switch_is_kept_once_by_whichever_run_reports_it_first(tmp_path):
    """The run that switched, one that joined it and a rerun after an interruption all report switch r1: the
    first keeps its record, the others write nothing, and the outcome file says who kept it."""
    given = dict(dir=str(tmp_path / "rec"), data={"host": "h", "port": 30000}, family=[7], gpus=[0],
                 sglang_version="0.5.9", installed=None)
    outcome = finished(tmp_path, action="switch", began=1796058514.5, seconds=0.4)
    kept = []
    for dummy in range(3):
        mgr = SglangSwitch(Module(record=dict(dir=given["dir"], data={"host": "other"})))
        result = dict(steps=STEPS, downtime=0.3, ready_after=2.0, elapsed=1.0)
        mgr.keep_record(result, outcome, given, False, str(tmp_path))
        kept.append(result["record_written"])
    assert [len(k) for k in kept] == [3, 0, 0]
    assert json.loads((tmp_path / "rec" / "last.json").read_text())["host"] == "h"  # the switch's run's data
    assert sorted(_files.read_json(str(tmp_path / "switch.json"))["recorded"]["files"]) == sorted(kept[0])


class Host(Module):
    """A host whose systemd has the unit installed and stopped (systemd is not PID 1 here); the rest is real."""

    def run_command(self, argv):
        if "systemctl" in argv:
            return 0, "ActiveState=inactive\nLoadState=loaded\nMainPID=0\n", ""
        return Module.run_command(self, argv)


@pytest.mark.parametrize("version, bad, with_unit", [("0.5.23", "--x", True), ("0.5.23", "--enable-piecewise-cuda-graph", False)])
def test_a_flag_the_installed_sglang_refuses_stops_the_cutover_before_the_stop(shell, tmp_path, monkeypatch, version, bad,
                                                                               with_unit):
    """The old server keeps its pid and its port answers throughout (a prober connects every 10 ms); a unit that
    would run the refused command is not even installed."""
    monkeypatch.setenv("PYTHONPATH", installed_double(tmp_path))
    monkeypatch.setenv("SGLANG_DOUBLE_VERSION", version)
    port = free_port()
    shell("%s > s.log 2>&1 & wait" % server_cmd(port))
    (pid,) = wait_listening(port)
    refused, stop = [], threading.Event()

    def probe():
        while not stop.is_set():
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
            except OSError as e:
                refused.append(str(e))
            time.sleep(0.01)
    prober = threading.Thread(target=probe)
    prober.start()
    command = [sys.executable, "-m", "sglang.launch_server", "--model-path", "/models/m", "--port", str(port), bad]
    mgr = SglangSwitch(Host(port=port, unit="sglang", state_dir=str(tmp_path / "state"), drain=5.0, release_strays=False,
                            target="unit", restart=False, executable=sys.executable, command=command,
                            devices=[str(tmp_path / "nvidia*")], timeout=30.0, install=dict(
                                unit="[Service]\nExecStart=%s\n" % " ".join(command), unit_dir=str(tmp_path / "units"),
                                environment="", environment_path=None, gate="", gate_path=None, wants=[])
                            if with_unit else None))
    try:
        with pytest.raises(Failed) as e:
            mgr.run()
    finally:
        stop.set()
        prober.join()
    out = e.value.args[0]
    assert out["msg"].startswith("preflight failed, nothing was %s: SGLang refuses the server's arguments: "
                                 "launch_server.py: error: unrecognized arguments: %s" % (
                                     "touched" if with_unit else "stopped", bad)), out["msg"]
    assert with_unit or out["action"] == "switch" and out["preflight"]["server"]["pid"] == pid
    assert not (tmp_path / "units").exists()
    assert _discover.listeners(port, _procfs.snapshot()) == [pid] and refused == []
    assert not (tmp_path / "state" / str(port) / "switch.json").exists()


class Started(Module):
    """systemd's times of the unit: started at 1.0 s, active (its gate passed) at 3.5 s."""

    def run_command(self, argv):
        return 0, "ExecMainStartTimestampMonotonic=1000000\nActiveEnterTimestampMonotonic=3500000\n", ""


def test_a_rerun_keeps_the_record_its_interrupted_run_did_not(tmp_path):
    """The controller was interrupted after the switch began: the rerun, which finds nothing to switch, keeps the
    switch's record from its plan and outcome (the load from systemd's times), once."""
    rec = dict(dir=str(tmp_path / "rec"), data={"host": "h", "port": 30000}, family=[7, 8], gpus=[0, 1],
               sglang_version="0.5.23", installed=None)
    _switch_outcome.write_json(str(tmp_path / "switch-plan-r1.json"), dict(id="r1", target="unit", record=rec))
    steps = [{"step": "stop server", "seconds": 3.1}, {"step": "start unit", "seconds": 0.02}]
    finished(tmp_path, action="switch", began=1796058514.5, seconds=3.3, steps=steps, downtime=3.2,
             started_at=1796058517.8)
    for n in range(2):
        mgr = SglangSwitch(Started(record=dict(dir=rec["dir"], data={"host": "rerun"})))
        result = dict(changed=False, msg="sglang-30000.service serves port 30000: nothing to switch")
        mgr.late_record(result, str(tmp_path), "sglang-30000.service")
        if n == 0:
            assert result["changed"] and "the record of switch r1" in result["msg"]
            assert len(result["record_written"]) == 3
        else:
            assert "record_written" not in result and not result["changed"]  # kept: nothing to do
    last = json.loads((tmp_path / "rec" / "last.json").read_text())
    assert last["host"] == "h" and last["steps"] == steps and last["downtime_switch_sec"] == 3.2
    assert last["load_sec"] == 2.5 and last["downtime_until_ready_sec"] == 5.7 and last["time"] == 1796058514.5
    assert last["old"] == {"family": [7, 8]} and (tmp_path / "rec" / "cutover-20261130T170834Z.json").exists()
