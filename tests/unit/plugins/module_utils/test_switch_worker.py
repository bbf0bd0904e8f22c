"""The switch's detached worker on real process trees: the family and its strays stopped among decoys, the drain."""
import json
import os
import subprocess
import threading

from ansible_collections.inferops.sglang.plugins.module_utils import _discover, _files, _preflight, _procfs, _switch_worker
from ansible_collections.inferops.sglang.plugins.module_utils._readiness import Server

from tests.unit.conftest import free_port, wait_for
from . import programs
from .conftest import Systemctl, server_cmd, wait_listening


def holders_of(path):
    return sorted(p.pid for p in _procfs.snapshot().values() if path in _procfs.open_files(p.pid).values())


def test_switch_stops_the_family_and_its_strays_and_nothing_else(shell, run, tmp_path):
    for n in range(4):
        (tmp_path / ("nvidia%d" % n)).touch()
    devices = [str(tmp_path / "nvidia*")]
    a, b = free_port(), free_port()
    # one operator's session: the server, a second server on other GPUs, a tail on the log, a watch on the pattern
    # a.log made first: a `tail -f` started before the server's redirect made it would exit at once
    shell(": > a.log; SGLANG_DOUBLE_FAULTS=untitled_orphan %s > a.log 2>&1 & %s --base-gpu-id 2 > b.log 2>&1 & "
          "tail -f a.log > /dev/null & bash -c 'exec -a \"watch pgrep -f sglang.launch_server\" sleep 600' & wait"
          % (server_cmd(a), server_cmd(b)))
    wait_listening(a)
    wait_listening(b)
    wait_for(lambda: holders_of(str(tmp_path / "nvidia2")), 10)
    stray = run(programs.HOLDER, str(tmp_path / "nvidia0"))[0]
    exe = tmp_path / "bin" / "nvidia-persistenced"
    exe.parent.mkdir()
    exe.write_bytes(open("/bin/sleep", "rb").read())
    exe.chmod(0o755)
    daemon = subprocess.Popen(["bash", "-c", "exec 3<%s 4<%s %s 600" % (tmp_path / "nvidia0", tmp_path / "nvidia1", exe)])
    wait_for(lambda: os.path.basename(os.readlink("/proc/%d/exe" % daemon.pid)) == "nvidia-persistenced")
    try:
        systemctl = Systemctl()

        # the untitled orphan detaches in two forks: look once it has left its intermediate parent
        def detached():
            f = _preflight.inspect(a, "sglang", devices, run=systemctl)
            return f if [m for m in f["family"] if "spawn_main" in m["cmdline"]] else None
        found = wait_for(detached, 10)
        assert found["owner"] == "adhoc" and found["problems"] == []
        titles = sorted(f["cmdline"] for f in found["family"] if f["cmdline"].startswith("sglang::"))
        assert titles == ["sglang::detokenizer", "sglang::scheduler_TP0", "sglang::scheduler_TP1"]
        assert found["gpus"] == [0, 1]
        assert [s["pid"] for s in found["strays"]] == [stray.pid]
        assert [(d["pid"], d["reason"]) for d in found["protected"]] == [(daemon.pid, "protected (nvidia-persistenced)")]
        family = [(f["pid"], f["starttime"]) for f in found["family"]]
        session = _procfs.snapshot()[found["server"]["pid"]].sid  # the operator's session: its tail and watch

        def bystanders():  # the second server's tree (all its processes up) and the tail and the watch
            snap = _procfs.snapshot()
            tree = [p.pid for p in snap.values() if str(b) in p.cmdline or p.pid in
                    _procfs.descendants(snap, _discover.listeners(b, snap))]
            rest = [p.pid for p in snap.values() if p.cmdline.startswith(("tail -f", "watch")) and p.sid == session]
            return (snap, tree, rest) if len(rest) == 2 and len(tree) >= 4 else None
        before_b, b_tree, others = wait_for(bystanders, 10)

        plan = dict(id="t1", action="switch", port=a, unit="sglang.service", unit_name="sglang",
                    state_dir=str(tmp_path / "state"), drain=5.0, release_strays=True, devices=devices)
        os.makedirs(plan["state_dir"])
        outcome = _switch_worker.Worker(plan, run=systemctl).go()
        assert outcome["error"] is None, outcome
        assert [s["step"] for s in outcome["steps"]] == [
            "stop wrapper", "stop server", "verify zero", "release GPUs", "start unit"]
        assert outcome["downtime"] > 0 and outcome["finished"]
        assert not [i for i in family if _procfs.is_alive(i)]
        assert _discover.listeners(a, _procfs.snapshot()) == []
        assert stray.wait(timeout=5) == -15
        assert daemon.poll() is None
        assert all(_procfs.is_alive((pid, before_b[pid].starttime)) for pid in b_tree + others)
        assert ["systemctl", "start", "--no-block", "sglang.service"] in systemctl.calls
        assert _files.read_json(os.path.join(plan["state_dir"], "switch.json")) == json.loads(json.dumps(outcome))
    finally:
        daemon.kill()
        daemon.wait()


def _stop_step(port, tmp_path, drain):
    plan = dict(id="t6", action="switch", port=port, unit="sglang.service", unit_name="sglang",
                state_dir=str(tmp_path / "state"), drain=drain, release_strays=False, devices=[str(tmp_path / "nvidia*")])
    os.makedirs(plan["state_dir"])
    outcome = _switch_worker.Worker(plan, run=Systemctl()).go()
    assert outcome["error"] is None, outcome
    return [s for s in outcome["steps"] if s["step"] == "stop server"][0]


def test_the_stop_ends_a_drained_server_without_waiting_for_its_own_look(shell, tmp_path):
    """SGLang looks at its drain only every few seconds (here 60): the switch ends it once the request in flight
    is answered and no connection is left, and not before."""
    port = free_port()
    shell("SGLANG_DOUBLE_WATCHDOG_SECONDS=60 SGLANG_DOUBLE_TOKEN_SECONDS=0.02 %s > s.log 2>&1 & wait" % server_cmd(port))
    wait_listening(port)
    server = Server("http://127.0.0.1:%d" % port)
    wait_for(lambda: server.request("/health").status == 200, 15)
    answers = []
    client = threading.Thread(target=lambda: answers.append(server.request(
        "/generate", {"text": "hi", "sampling_params": {"max_new_tokens": 60}}, timeout=30)))
    client.start()
    wait_for(lambda: _discover.connections(port), 5)
    stop = _stop_step(port, tmp_path, drain=30.0)
    client.join(30)
    assert [a.status for a in answers] == [200]  # answered in full: 60 tokens x 0.02 s before the kill
    assert answers[0].json()["meta_info"]["completion_tokens"] == 60
    assert stop["drained"] and stop["escalated"]
    assert stop["seconds"] >= 0.5 and stop["timings"]["first_signal"] < 30  # neither before the answer nor the budget
    assert _discover.listeners(port, _procfs.snapshot()) == []


def test_a_server_that_ignores_sigterm_gets_the_whole_drain_budget(shell, tmp_path):
    port = free_port()
    shell("SGLANG_DOUBLE_FAULTS=ignore_sigterm %s > s.log 2>&1 & wait" % server_cmd(port))
    wait_listening(port)
    server = Server("http://127.0.0.1:%d" % port)
    wait_for(lambda: server.request("/health").status == 200, 15)
    stop = _stop_step(port, tmp_path, drain=1.5)
    assert not stop["drained"] and stop["escalated"]
    assert stop["timings"]["first_signal"] >= 1.5
