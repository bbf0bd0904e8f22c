"""sglang_switch's wait and record, after the switch: against the SGLang double on loopback (the captured command
started again), a process that dies, and the record it keeps. The detached switch itself is test_switch_worker.py's."""
import functools
import json
import os
import socket
import subprocess
import sys
import threading
import time

import pytest

from ansible_collections.inferops.sglang.plugins.module_utils._server import (
    capture as _capture, listeners as _listeners, port_units as _port_units, sglang_args as _sglang_args)
from ansible_collections.inferops.sglang.plugins.module_utils._host import (
    files as _files, procfs as _procfs, selinux as _selinux)
from ansible_collections.inferops.sglang.plugins.module_utils._switch import (
    lock as _switch_lock, outcome as _switch_outcome, record as _record)
from ansible_collections.inferops.sglang.plugins.module_utils._host.redact import MASK
from ansible_collections.inferops.sglang.plugins.module_utils._manager_sglang_switch import SglangSwitch
from tests.unit.conftest import free_port, wait_for
from .conftest import (NOBODY, Failed, FakeModule, Systemd, double_venv, in_mount_namespace, installed_double, server_cmd,
                       wait_listening)


class Module(FakeModule):
    """What the manager uses of AnsibleModule."""

    defaults = dict(redact=[], record=None, wait=None, existing_units="replace", capture=None, user="root", group=None,
                    start=True, rank=None, gpus=[], release_users=[], progress=None)


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
                              record=dict(write=True, data={"host": "h", "port": 30000, "failure": "unit failed"})))
    result = dict(msg="rollback: stop server 0.20 s", steps=STEPS, downtime=0.21, pid_started=p.pid, action="rollback")
    outcome = finished(tmp_path, pid_started=p.pid, began=1796058514.5)
    mgr.serve(result, outcome, "sglang.service", str(tmp_path), back=True)
    assert result["ready_after"] > 1.0 and result["model"] and result["generated"]
    assert result["msg"].startswith("rollback: stop server 0.20 s; the captured command ready after")
    given = _record.switch_plan(mgr.params["record"], str(tmp_path / "30000"), dict(family=[], gpus=[]), None, None)
    mgr.keep_record(result, outcome, given, True, str(tmp_path))
    record = json.loads((tmp_path / "30000" / "last.json").read_text())
    assert record == dict(host="h", port=30000, failure="unit failed", time=1796058514.5, action="rollback",
                          rollback_steps=STEPS, rollback_downtime_sec=0.21, pid_started=p.pid,
                          ready_after_sec=result["ready_after"], units_restored=None, unit_started=None,
                          previous_unit=False)
    assert (tmp_path / "30000" / "history" / "20261130T170834Z-rollback.json").exists()
    assert "# Rollback of port 30000 on h" in (tmp_path / "30000" / "last.md").read_text()
    assert sorted(result["record_written"]) == sorted(str(tmp_path / "30000" / n) for n in (
        "last.json", "last.md", "history/20261130T170834Z-rollback.json"))
    assert result["record_removed"] == []


def test_what_the_switch_started_dies_and_the_failure_says_so_with_the_steps_and_its_log(tmp_path):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    log = tmp_path / "sglang.log"
    log.write_text("loading\nRuntimeError: CUDA out of memory\n")
    (tmp_path / "capture.json").write_text(json.dumps({"stdout": str(log)}))
    mgr = SglangSwitch(Module(wait=wait("http://127.0.0.1:9", timeout=30.0),
                              record=dict(write=True, data={"host": "h"})))
    result = dict(msg="rollback: stop server 0.20 s", steps=STEPS, action="rollback")
    with pytest.raises(Failed) as e:
        mgr.serve(result, dict(pid_started=dead.pid, began=1796058514.5), "sglang.service", str(tmp_path), back=True)
    out = e.value.args[0]
    assert out["wait_failed"] and out["steps"] == STEPS and out["log_lines"][-1] == "RuntimeError: CUDA out of memory"
    assert out["msg"] == ("rollback: stop server 0.20 s; then the captured command did not serve: pid %d exited"
                          % dead.pid)
    assert out["wait_seconds"] < 5 and not (tmp_path / "rec").exists()


def test_a_port_another_process_holds_is_named_before_what_the_start_died_of(tmp_path):
    """The holder of the port is the cause of what the start shows then (its bind failed): named first, whatever else
    the wait's checks find (here what was started has exited too)."""
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    port = free_port()
    holder = subprocess.Popen([sys.executable, "-c", "import socket; s = socket.socket(); "
                               "s.bind(('127.0.0.1', %d)); s.listen(8); kept = []\n"
                               "while True: kept.append(s.accept())" % port])  # a server: it accepts, never answers
    try:
        wait_listening(port)
        mgr = SglangSwitch(Module(wait=wait("http://127.0.0.1:%d" % port, timeout=30.0)))
        result = dict(msg="rollback: stop server 0.20 s", steps=STEPS, action="rollback")
        with pytest.raises(Failed) as e:
            mgr.serve(result, dict(pid_started=dead.pid, began=1796058514.5), "sglang.service", str(tmp_path),
                      back=True)
    finally:
        holder.kill()
        holder.wait()
    out = e.value.args[0]
    assert out["wait_failed"] and out["wait_seconds"] < 5
    assert out["msg"].startswith("rollback: stop server 0.20 s; then the captured command did not serve: "
                                 "port %d is held by pid %d (" % (port, holder.pid)), out["msg"]


def test_the_cutover_record_is_completed_on_the_host(tmp_path):
    mgr = SglangSwitch(Module(record=dict(write=True, data={"host": "h", "port": 30000, "old": {"pid": 7},
                                                            "stages_sec": {"discover": 0.4}})))
    result = dict(msg="switch", action="switch", steps=STEPS, downtime=0.3, ready_after=11.0, wait_seconds=11.2,
                  model="m", generated="", generated_tokens=1, sglang_version="0.5.23", elapsed=1.5,
                  installed=dict(seconds=0.5, unit_path="/etc/systemd/system/s.service", checksum="ab",
                                 environment_names=["A"]))
    given = dict(mgr.params["record"], dir=str(tmp_path), family=[7, 8], gpus=[0, 1], sglang_version="0.5.23", installed=result.pop("installed"))
    mgr.keep_record(result, finished(tmp_path, action="switch", began=1796058514.5), given, False, str(tmp_path))
    rec = json.loads((tmp_path / "last.json").read_text())
    # an empty text with a token generated is a generation (a real model's first token can end the sequence)
    assert rec["old"] == {"pid": 7, "family": [7, 8]} and rec["gpus"] == [0, 1] and rec["generated"] is True
    assert rec["stages_sec"] == {"discover": 0.4, "unit": 0.5, "switch": 1.0, "verify": 11.2}
    assert rec["downtime_until_ready_sec"] == 11.3 and rec["load_sec"] == 11.0 and rec["model"] == "m"
    unit = (rec["unit_path"], rec["unit_checksum"], rec["environment_names"])
    assert unit == ("/etc/systemd/system/s.service", "ab", ["A"])
    assert result["report"].startswith("# Cutover of port 30000 on h") and (tmp_path / "history" / "20261130T170834Z-cutover.json").exists()


def test_the_record_of_a_switch_is_kept_once_by_whichever_run_reports_it_first(tmp_path):
    """The run that switched, one that joined it and a rerun after an interruption all report switch r1: the
    first keeps its record, the others write nothing, and the outcome file says who kept it."""
    given = dict(dir=str(tmp_path / "rec"), data={"host": "h", "port": 30000}, family=[7], gpus=[0],
                 sglang_version="0.5.9", installed=None)
    outcome = finished(tmp_path, action="switch", began=1796058514.5, seconds=0.4)
    kept = []
    for dummy in range(3):
        mgr = SglangSwitch(Module(record=dict(write=True, data={"host": "other"})))
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
    venv = double_venv(tmp_path)  # root's alone: its python may be run as root
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
    command = [venv.python, "-m", "sglang.launch_server", "--model-path", "/models/m", "--port", str(port), bad]
    mgr = SglangSwitch(Host(port=port, unit="sglang", state_dir=str(tmp_path / "state"), drain=5.0, release_strays=False,
                            target="unit", restart=False, executable=venv.python, command=command,
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
    assert out["msg"].startswith("preflight failed, nothing was touched: SGLang refuses the server's arguments: "
                                 "launch_server.py: error: unrecognized arguments: %s" % bad), out["msg"]
    assert out["action"] == "switch" and out["preflight"]["server"]["pid"] == pid and out["changed"] is False
    assert not (tmp_path / "units").exists()
    assert _listeners.listeners(port, _procfs.snapshot()) == [pid] and refused == []
    assert not (tmp_path / "state" / str(port) / "switch.json").exists()


def refused_with_rank_1_s_command(shell, tmp_path, monkeypatch, **params):
    """A server of one host running by hand, and a switch to a unit whose command is rank 1 of a server over two hosts
    (params: the module's other options): the module's failure, refused by the preflight; the server untouched (its
    pid the port's only listener) and no unit installed. (the failure, the port)"""
    monkeypatch.setenv("PYTHONPATH", installed_double(tmp_path))
    venv = double_venv(tmp_path)
    port = free_port()
    shell("%s > s.log 2>&1 & wait" % server_cmd(port))
    (pid,) = wait_listening(port)
    command = [venv.python, "-m", "sglang.launch_server", "--model-path", "/models/m", "--port", str(port), "--tp", "2",
               "--nnodes", "2", "--node-rank", "1", "--dist-init-addr", "10.0.0.1:20000"]
    mgr = SglangSwitch(Host(port=port, unit="sglang", state_dir=str(tmp_path / "state"), drain=5.0, release_strays=False,
                            target="unit", restart=False, executable=venv.python, command=command,
                            devices=[str(tmp_path / "nvidia*")], timeout=30.0, install=dict(
                                unit="[Service]\nExecStart=%s\n" % " ".join(command), unit_dir=str(tmp_path / "units"),
                                environment="", environment_path=None, gate="", gate_path=None, wants=[]), **params))
    with pytest.raises(Failed) as e:
        mgr.run()
    out = e.value.args[0]
    assert out["msg"].startswith("preflight failed, nothing was touched: ") and out["changed"] is False
    assert not (tmp_path / "units").exists() and _listeners.listeners(port, _procfs.snapshot()) == [pid]
    return out, port


@pytest.mark.parametrize("check_mode", [True, False], ids=["the group's look", "the switch"])
def test_a_hand_launched_rank_0_waiting_for_its_group_stops_the_group_s_switch_naming_it(
        check_mode, shell, tmp_path, monkeypatch):
    """Rank 0 of a server over two hosts launched by hand, its rank 1 never started: it holds --dist-init-addr's port
    but not yet --port. The group's look at rank 0 (check mode) and its switch find nothing on the port, and are
    refused before anything is stopped or installed, naming that process (the unit's rank 0 could not take the
    store's port); it goes on waiting."""
    monkeypatch.setenv("PYTHONPATH", installed_double(tmp_path))
    venv = double_venv(tmp_path)
    port, store = free_port(), free_port()
    multi = ["--nnodes", "2", "--node-rank", "0", "--dist-init-addr", "127.0.0.1:%d" % store]
    shell("%s %s > s.log 2>&1 & wait" % (server_cmd(port), " ".join(multi)))
    (pid,) = wait_listening(store)
    command = [venv.python, "-m", "sglang.launch_server", "--model-path", "/models/m", "--port", str(port), "--tp", "2"]
    mgr = SglangSwitch(Host(port=port, unit="sglang", state_dir=str(tmp_path / "state"), drain=5.0, release_strays=False,
                            target="unit", restart=False, executable=venv.python, command=command + multi, rank=0,
                            check_mode=check_mode, devices=[str(tmp_path / "nvidia*")], timeout=30.0, install=dict(
                                unit="[Service]\nExecStart=%s\n" % " ".join(command + multi),
                                unit_dir=str(tmp_path / "units"), environment="", environment_path=None, gate="",
                                gate_path=None, wants=[])))
    with pytest.raises(Failed) as e:
        mgr.run()
    out = e.value.args[0]
    assert out["msg"].startswith("preflight failed, nothing was touched: port %d of --dist-init-addr, where the unit's "
                                 "rank 0 hosts its group's store, is held by pid %d (" % (store, pid)), out["msg"]
    assert out["action"] == "start" and out["changed"] is False and not (tmp_path / "units").exists()
    procs = _procfs.snapshot()
    assert _listeners.listeners(store, procs) == [pid] and not _listeners.listeners(port, procs)


def test_a_unit_command_of_one_rank_of_a_multi_node_server_stops_the_cutover_before_the_stop(
        shell, tmp_path, monkeypatch):
    """The unit's command (the operator's) is one rank of a server over two hosts, and no group switches it."""
    out, port = refused_with_rank_1_s_command(shell, tmp_path, monkeypatch)
    assert ("the unit's command for port %d is rank 1 of a 2-node SGLang server" % port) in out["msg"], out["msg"]


def test_a_rank_given_where_the_server_is_on_one_host_stops_the_cutover_before_the_stop(shell, tmp_path, monkeypatch):
    """The group's switch names a host's rank, but the server there is not one rank of a multi-node server (the
    inventory group holds a host of another server)."""
    out, port = refused_with_rank_1_s_command(shell, tmp_path, monkeypatch, rank=1, start=False)
    assert ("the server on port %d is not one rank of a multi-node SGLang server (no --nnodes above 1), yet it is to be "
            "switched as rank 1 of one" % port) in out["msg"], out["msg"]
    assert "the unit's command" not in out["msg"], "the unit's command is rank 1, as its group says"
    assert out["action"] == "stop"


@pytest.mark.parametrize("owner, active, action", [
    ("adhoc", "inactive", "stop"), ("unit", "active", "stop"), (None, "activating", "stop"), (None, "inactive", "none"),
    (None, "failed", "none")])
def test_start_false_stops_what_serves_the_port_or_the_unit_still_starting_and_nothing_else(
        tmp_path, owner, active, action):
    mgr = SglangSwitch(Module(port=30000, unit="sglang", start=False, capture="{}"))
    mgr.state_dir, mgr.back, mgr.restart, mgr.active, mgr.units = str(tmp_path), False, False, active, []
    mgr.insp, mgr.capture = {"owner": owner}, object()
    mgr.decide()
    assert mgr.action == action
    assert mgr.keeps_capture(), "a rank's capture is kept though its server ended with rank 0 since its discovery"
    mgr.params["start"] = True
    assert not mgr.keeps_capture(), "with start, only a switch keeps it (or a take-over of the operator's own unit)"


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
        mgr = SglangSwitch(Started(record=dict(write=True, data={"host": "rerun"})))
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
    assert last["old"] == {"family": [7, 8]} and (tmp_path / "rec" / "history" / "20261130T170834Z-cutover.json").exists()


FAKE_SYSTEMCTL = """#!/bin/sh
# systemctl show for a host where the unit is not installed (systemd is not PID 1 here)
case "$1" in
  show) for p in $(echo "$2" | sed 's/^--property=//; s/,/ /g'); do
          case "$p" in LoadState) echo "LoadState=not-found" ;; MainPID) echo "MainPID=0" ;; *) echo "$p=" ;; esac
        done ;;
  *) exit 0 ;;
esac
"""


def test_the_module_shows_no_secret_of_its_command(tmp_path):
    """The real module (AnsibleModule), in check and diff mode, given a command with --api-key and an abbreviated
    --admin-api: its result, and the arguments it says it was invoked with (what -vvv and AWX's job
    events show), hold none of them. (no_log on the whole command would mask every word of it, "30000" included,
    wherever it appears in the result.)"""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "systemctl").write_text(FAKE_SYSTEMCTL)
    (bin_dir / "systemctl").chmod(0o755)
    port = free_port()
    venv = double_venv(tmp_path)  # root's alone: its python may be run as root
    command = [venv.python, "-m", "sglang.launch_server", "--model-path", "/models/m", "--port", str(port),
               "--api-key", "sk-vvv-1", "--admin-api=adm-vvv-2"]
    args = tmp_path / "args.json"
    args.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": dict(
        port=port, unit="sglang-t", state_dir=str(tmp_path / "state"), command=command, executable=venv.python,
        _ansible_check_mode=True, _ansible_diff=True,
        _ansible_inject_invocation=True)}))  # ansible-core 2.16 always returns it; later ones when configured
    from tests.unit.conftest import COLLECTIONS
    env = dict(os.environ, PYTHONPATH=COLLECTIONS, PATH="%s:%s" % (bin_dir, os.environ["PATH"]))
    p = subprocess.run([sys.executable, "-m", "ansible_collections.inferops.sglang.plugins.modules.sglang_switch",
                        str(args)], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True,
                       timeout=120, check=False)
    result = json.loads(p.stdout)
    assert result["action"] == "start" and not result.get("failed"), result["msg"]
    shown = result["invocation"]["module_args"]["command"]
    assert shown[-3] == "--api-key" and shown[-2] == "VALUE_SPECIFIED_IN_NO_LOG_PARAMETER", shown
    assert shown[-1] == "--admin-api=********", shown
    assert str(port) in json.dumps(result["invocation"]), "the rest of the command is shown as it is"
    for secret in ("sk-vvv-1", "adm-vvv-2"):
        assert secret not in p.stdout and secret not in p.stderr


class Journal(Module):
    """A host whose unit's journal ends with the server's argv and its server_args, every secret in them."""

    line = ("launch_server --api-key sk-cmd-1 --admin-api=adm-cmd-2 server_args=ServerArgs(api_key='sk cmd 1', "
            "hf_token='hf-3') HF_TOKEN=hf-env-4 Load weight begin with sk-wait-5 and sk-cmd-1 bare")

    def run_command(self, argv):
        if "journalctl" in argv:
            return 0, "earlier\n" + self.line + "\n", ""
        return Module.run_command(self, argv)


def test_no_secret_of_the_command_nor_of_the_wait_reaches_the_progress_line(tmp_path):
    """The switch's call says where it is in its progress file (what the role prints): the unit's last log line, with
    every secret masked where the line is written - the command's (flag, abbreviated flag, bare value), the wait's key,
    a repr's quoted fields, secret names - at most one line every PROGRESS_EVERY s, the file removed at the end."""
    path = tmp_path / "state" / "30000" / "switch-progress.jsonl"
    mgr = SglangSwitch(Journal(
        command=["/venv/bin/python", "-m", "sglang.launch_server", "--api-key", "sk-cmd-1", "--admin-api=adm-cmd-2"],
        wait=wait("http://127.0.0.1:9", api_key="sk-wait-5"), progress=str(path)))
    mgr.command, mgr.unit, mgr.back, mgr.result = mgr.params["command"], "sglang-t.service", False, {}
    mgr.progress_file()
    mgr.tell(None)
    assert json.loads(path.read_text())["says"].startswith("stopping, ")
    mgr.tell(dict(STARTED_OUTCOME))  # within PROGRESS_EVERY of the last: no line
    assert len(path.read_text().splitlines()) == 1
    mgr.told_at -= 10
    mgr.tell(dict(STARTED_OUTCOME))
    said = json.loads(path.read_text().splitlines()[-1])["says"]
    assert said.startswith("loading, ") and said.endswith(
        ": launch_server --api-key {0} --admin-api={0} server_args=ServerArgs(api_key='{0}', hf_token='{0}') "
        "HF_TOKEN={0} Load weight begin with {0} and {0} bare".format(MASK)), said
    for secret in ("sk-cmd-1", "adm-cmd-2", "sk cmd 1", "hf-3", "hf-env-4", "sk-wait-5"):
        assert secret not in path.read_text()
    mgr.progress.close()
    assert not path.exists()


STARTED_OUTCOME = {"id": "r1", "steps": [{"step": "start unit", "seconds": 0.1}], "started_at": 1.0}


def files_under(*folders):
    """Every file and folder under folders: {path: (mode, content)} (content None for a folder)."""
    out = {}
    for folder in folders:
        for root, dirs, names in os.walk(str(folder)):
            out[root] = (os.stat(root).st_mode, None)
            for n in names:
                path = os.path.join(root, n)
                with open(path, "rb") as f:
                    out[path] = (os.stat(path).st_mode, f.read())
    return out


KIMI = ("[Service]\nType=simple\nExecStart=%s -m sglang.launch_server --model-path /models/m --port %d\n"
        "Restart=always\n[Install]\nWantedBy=multi-user.target\n")


@pytest.mark.parametrize("cause, says", [
    ("refuse", "existing_units is refuse, and a unit that could serve port"),
    ("full", "free in its filesystem"),
    ("read-only", "is on a read-only filesystem"),
    ("lock", "switch.lock stays held, with no switch in progress"),
])
def test_a_refusal_installs_enables_and_writes_nothing_and_says_why(shell, tmp_path, monkeypatch, cause, says):
    """The server runs by hand beside the operator's enabled unit for its port: each refusal leaves the unit files,
    systemd's state and the state folder as they were, reports changed=false, and stops nothing."""
    monkeypatch.setenv("PYTHONPATH", installed_double(tmp_path))
    monkeypatch.setenv("SGLANG_DOUBLE_VERSION", "0.5.23")
    monkeypatch.setattr(_switch_lock, "LOCK_WAIT", 1.0)
    port = free_port()
    shell("%s > s.log 2>&1 & wait" % server_cmd(port))
    (pid,) = wait_listening(port)
    units, state = tmp_path / "etc", tmp_path / "state"
    units.mkdir()
    state.mkdir()
    venv = double_venv(tmp_path)  # root's alone: its python may be run as root
    (units / "kimi.service").write_text(KIMI % (venv.python, port))
    monkeypatch.setattr(_port_units, "UNIT_DIRS", (str(units),))
    holder = None
    if cause == "lock":
        (state / str(port)).mkdir(mode=0o700)
        holder = subprocess.Popen(["flock", str(state / str(port) / "switch.lock"), "sleep", "60"])
        wait_for((state / str(port) / "switch.lock").exists)
    systemd = Systemd(**{"kimi.service": dict(UnitFileState="enabled")})
    command = [venv.python, "-m", "sglang.launch_server", "--model-path", "/models/m", "--port", str(port)]

    class Module(Host):
        def run_command(self, argv):
            return systemd(argv)

    mgr = SglangSwitch(Module(
        port=port, unit="sglang", state_dir=str(state), drain=5.0, release_strays=False, target="unit", restart=False,
        executable=venv.python, command=command, devices=[str(tmp_path / "nvidia*")], timeout=30.0,
        existing_units="refuse" if cause == "refuse" else "replace", capture=json.dumps(_capture.capture(pid)),
        install=dict(unit="[Service]\nExecStart=%s\n" % " ".join(command), unit_dir=str(units), environment="A=1\n",
                     environment_path=str(tmp_path / "env" / "sglang.env"), gate="", gate_path=None, wants=[])))

    def refused():
        before = files_under(units, state)
        with pytest.raises(Failed) as e:
            mgr.run()
        return e.value.args[0], before, files_under(units, state)
    try:
        if cause in ("full", "read-only"):
            out, before, after = in_mount_namespace(refused, str(state), "size=100k" + (",ro" if cause == "read-only"
                                                                                        else ""))
        else:
            out, before, after = refused()
    finally:
        if holder:
            holder.kill()
            holder.wait()
    starts = ("preflight failed, nothing was touched: ", "could not start the switch, nothing was touched: ")
    assert out["msg"].startswith(starts) and says in out["msg"], out["msg"]
    assert out["changed"] is False and after == before
    assert not (tmp_path / "env").exists() and not [c for c in systemd.calls if c[0] != "reset-failed"]
    assert _listeners.listeners(port, _procfs.snapshot()) == [pid]


@pytest.mark.parametrize("text", ["--api-key sk-not-json", json.dumps(["sk-a-list"])])
def test_a_capture_that_is_not_a_json_object_fails_before_anything_and_is_never_quoted(tmp_path, text):
    mgr = SglangSwitch(Host(port=30000, unit="sglang", state_dir=str(tmp_path / "state"), drain=5.0, target="unit",
                            release_strays=False, restart=False, executable=None, command=[], devices=[], timeout=1.0,
                            install=None, capture=text))
    with pytest.raises(Failed) as e:
        mgr.run()
    assert e.value.args[0]["msg"] == ("capture must be a capture as JSON text (sglang_discover's stored, to_json): "
                                      "an object") and not (tmp_path / "state").exists()


def probed(venv, **params):
    """The manager's probe of the venv's python: (version, problems, the parser's answer, warnings)."""
    command = [venv.python, "-m", "sglang.launch_server", "--model-path", "m", "--x"]
    mgr = SglangSwitch(Module(port=30000, unit="sglang", state_dir="/nonexistent", drain=1.0, target="unit",
                              executable=None, command=command, timeout=None, **params))
    mgr.validate()
    mgr.probe()
    version, why = _sglang_args.version(venv.python, mgr.asked)
    return version, why, mgr.parsed(mgr.python, mgr.parsing) if mgr.parsing else None, mgr.module.warnings


@pytest.mark.skipif(os.getuid() != 0, reason="needs root: it probes as nobody")
def test_the_probes_run_as_the_units_user_never_as_root_in_the_owners_venv(nobody_venv):
    """The venv is nobody's, with a .pth that writes the uid it runs as: with the unit's User=nobody both questions
    run (and answer) as nobody; with User=root neither runs, and the warning names the venv and its owner."""
    assert probed(nobody_venv, user="nobody", group=None)[:3] == (
        "0.5.23", [], "SGLang refuses the server's arguments: launch_server.py: error: unrecognized arguments: --x")
    assert nobody_venv.ran_as() and set(nobody_venv.ran_as()) == {NOBODY.pw_uid}
    nobody_venv.uids.write_text("")
    version, why, said, warnings = probed(nobody_venv, user="root", group=None)
    assert (version, why, said, nobody_venv.ran_as()) == (None, [], None, [])
    assert warnings == ["%s was not asked for SGLang's version nor given the server's arguments to parse: it would "
                        "run as root, and %s is owned by nobody. Run the unit as the user who owns the venv (user, "
                        "group), or make the venv root's alone" % (nobody_venv.python, nobody_venv.path)]


def test_an_unknown_user_fails_before_anything_runs(tmp_path):
    with pytest.raises(Failed) as e:
        probed(double_venv(tmp_path), user="no-such-user", group=None)
    assert e.value.args[0]["msg"] == "the unit's User=no-such-user or Group= is not known on the host"


def test_the_switch_relabels_only_when_the_preflight_found_nothing_else(tmp_path, monkeypatch):
    """SELinux enforcing (the enforce file and the labels given as in test_selinux.py), the tools there: a preflight
    with another problem runs neither semanage nor restorecon; one without runs both."""
    script = str(tmp_path / "sglang")
    (tmp_path / "sglang").write_text("#!/usr/bin/python3\n")
    (tmp_path / "enforce").write_text("1")
    labels = {script: "unconfined_u:object_r:admin_home_t:s0"}

    def getxattr(path, name):
        return labels[path].encode()
    monkeypatch.setattr(_selinux, "check", functools.partial(
        _selinux.check, enforce=str(tmp_path / "enforce"), getxattr=getxattr, which=lambda name: "/usr/sbin/" + name))
    monkeypatch.setattr(_selinux, "fix", functools.partial(_selinux.fix, getxattr=getxattr))
    ran = []

    class Module(FakeModule):
        def run_command(self, argv):
            ran.append(argv)
            if argv[4].endswith("restorecon"):
                labels[script] = "system_u:object_r:bin_t:s0"
            return 0, "", ""

    mgr = SglangSwitch(Module(redact=[]))
    problems = ["port 30000 is held by another server"]
    decision = mgr.selinux(script, problems)
    assert (decision["action"], decision["fixed"], ran) == ("fix", False, [])
    assert decision["msg"].endswith("(not done: the preflight found other problems)")
    assert problems == ["port 30000 is held by another server"]
    assert mgr.selinux(script, [])["fixed"] is True
    assert [argv[4] for argv in ran] == ["/usr/sbin/semanage", "/usr/sbin/restorecon"]  # each under timeout


def test_a_restart_that_changes_the_unit_keeps_its_files_as_they_served_for_its_rollback_alone(tmp_path):
    """A restart of the serving unit that changes its files keeps them as they are (a file it adds: none) in
    previous-unit.json, 0600, for a rollback of that run only; any other switch leaves no earlier unit behind."""
    from ansible_collections.inferops.sglang.plugins.module_utils._host.files import File  # noqa: E501 pylint: disable=import-outside-toplevel
    state = tmp_path / "30000"
    state.mkdir()
    unit = tmp_path / "sglang.service"
    unit.write_text("[Service]\nExecStart=/v/python -m sglang.launch_server\n")
    unit.chmod(0o644)
    mgr = SglangSwitch(Module(port=30000, unit="sglang"))
    mgr.state_dir, mgr.unit, mgr.result, mgr.action = str(state), "sglang.service", {}, "restart"
    mgr.insp, mgr.units = {"owner": "unit"}, []
    mgr.staged = ({}, [File(str(unit), "[Service]\nExecStart=/v/python -m sglang.launch_server --bad\n", 0o644, 0, 0),
                       File(str(tmp_path / "new.conf"), "x\n", 0o644, 0, 0)])
    mgr.keep_previous("r1")
    kept = json.loads((state / "previous-unit.json").read_text())
    assert (state / "previous-unit.json").stat().st_mode & 0o777 == 0o600
    assert kept["run"] == "r1" and kept["unit"] == "sglang.service"
    assert kept["files"] == [dict(path=str(unit), mode=0o644, text="[Service]\nExecStart=/v/python -m sglang.launch_server\n"),
                             dict(path=str(tmp_path / "new.conf"), mode=None, text=None)]
    assert mgr.previous_unit("r1") == str(state / "previous-unit.json") and mgr.previous_unit("r0") is None
    mgr.units = [{"unit": "sglang.service", "action": "rewrite"}]  # the operator's own file: units.json's to put back
    mgr.keep_previous("r2")
    assert not (state / "previous-unit.json").exists() and mgr.previous_unit("r1") is None
    mgr.units = []
    mgr.keep_previous("r1")
    assert mgr.previous_unit("r1") == str(state / "previous-unit.json")
    mgr.action = "switch"  # a later switch of another kind: the kept copy is no longer anyone's way back
    mgr.keep_previous("r3")
    assert not (state / "previous-unit.json").exists()


SERVING_HOLDER = """
import socket, sys, time
held = open(sys.argv[2], "rb")
s = socket.socket()
s.bind(("127.0.0.1", int(sys.argv[3])))
s.listen()
time.sleep(600)
"""


@pytest.mark.parametrize("release_strays", [False, True])
def test_a_process_that_serves_on_the_servers_gpu_is_never_offered_for_release(shell, spawn, tmp_path, monkeypatch,
                                                                               release_strays):
    """A program that is no SGLang server, listening on a port of its own, holds the server's GPU 0: the preflight
    refuses, says the switch never stops a process that serves, and suggests no release - with release_strays too."""
    monkeypatch.setenv("PYTHONPATH", installed_double(tmp_path))
    venv = double_venv(tmp_path)
    port, theirs = free_port(), free_port()
    shell("%s --tp 1 > s.log 2>&1 & wait" % server_cmd(port))
    (pid,) = wait_listening(port)
    (tmp_path / "nvidia0").touch()
    other = spawn.python(SERVING_HOLDER, str(tmp_path / "nvidia0"), str(theirs))
    wait_listening(theirs)
    command = [venv.python, "-m", "sglang.launch_server", "--model-path", "/models/m", "--port", str(port)]
    mgr = SglangSwitch(Host(port=port, unit="sglang", state_dir=str(tmp_path / "state"), drain=5.0,
                            release_strays=release_strays, target="unit", restart=False, executable=venv.python,
                            command=command, devices=[str(tmp_path / "nvidia*")], timeout=30.0, install=None))
    with pytest.raises(Failed) as e:
        mgr.run()
    msg = e.value.args[0]["msg"]
    assert msg.startswith("preflight failed, nothing was touched: processes outside the server's family that serve on "
                          "ports of their own hold its GPUs [0]: %d " % other.pid), msg
    assert "serving on port %d" % theirs in msg and "The switch never stops a process that serves" in msg, msg
    assert "allow the switch to release" not in msg and "release_users" not in msg, msg
    assert other.poll() is None and _listeners.listeners(port, _procfs.snapshot()) == [pid]


@pytest.mark.skipif(os.getuid() != 0, reason="needs root: the command is nobody's")
@pytest.mark.parametrize("name, first", [("sglang", "#!/usr/bin/python3\n"), ("serve.sh", "#!/bin/sh\n")])
def test_the_probe_never_runs_as_root_a_command_another_user_can_change_whatever_it_is(home, name, first):
    """Not only a python's venv: nobody's console script (its shebang root's python) or shell script is never probed as
    root; the warning names it."""
    script = home / name
    script.write_text(first)
    script.chmod(0o755)
    os.chown(str(script), NOBODY.pw_uid, NOBODY.pw_gid)
    mgr = SglangSwitch(Module(port=30000, unit="sglang", state_dir="/nonexistent", drain=1.0, target="unit",
                              executable=str(script), command=[str(script), "serve", "--model-path", "m"], timeout=None))
    mgr.validate()
    mgr.probe()
    assert (mgr.asked, mgr.parsing) == (None, None)
    (warning,) = mgr.module.warnings
    assert "it would run as root, and %s is owned by nobody" % home in warning


def test_a_switch_process_that_ended_without_a_word_fails_the_module_with_its_journal(tmp_path):
    """Its own process ended before its first line (a lock another held for LOCK_WAIT, an exception at its start): the
    module fails at once, with the last lines of the transient unit's journal, which say why."""
    state = tmp_path / "state"
    state.mkdir()
    _switch_lock.claim(dict(id="t12", action="switch", state_dir=str(state)), None)
    gone = subprocess.Popen(["true"])
    gone.wait()
    _switch_lock.worker_started(str(state), "t12", gone.pid)
    unit = "inferops-sglang-switch-1-t12.service"
    asked = []

    def run(argv):
        asked.append(argv)
        return 0, "another switch of port 1 holds the lock %s/switch.lock\n" % state, ""
    mgr = SglangSwitch(Module())
    mgr.module.run_command = run
    mgr.state_dir, mgr.run_id, mgr.timeout, mgr.action, mgr.port = str(state), "t12", 30, "switch", 1
    mgr.result, mgr.progress, mgr.told_at = {"launched": ["systemd-run", "--unit", unit, "--collect"]}, None, None
    with pytest.raises(Failed) as e:
        mgr.wait_switch()
    assert e.value.args[0]["msg"].startswith("the switch process %d ended without reporting" % gone.pid)
    assert e.value.args[0]["log_lines"] == ["another switch of port 1 holds the lock %s/switch.lock" % state]
    journal = [a for a in asked if "journalctl" in a][0]
    assert journal[journal.index("journalctl"):] == ["journalctl", "-u", unit, "-n", "10", "--no-pager", "-o", "cat"]
