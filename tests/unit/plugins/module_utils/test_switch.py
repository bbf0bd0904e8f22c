"""The switch on real process trees: preflight among decoys, the detached worker's steps, the lock."""
import json
import os
import subprocess
import sys
import threading

import pytest

from ansible_collections.inferops.sglang.plugins.module_utils import _discover, _procfs, _signals, _switch
from ansible_collections.inferops.sglang.plugins.module_utils._readiness import Server

from tests.unit.conftest import COLLECTIONS, free_port, wait_for
from . import programs
from .conftest import run_command, server_cmd, wait_listening


class Systemctl:
    """Runs every command for real except systemctl (systemd is not PID 1 on this machine; the molecule
    scenarios run the switch against a real one). Records what the worker asked of it."""

    def __init__(self):
        self.calls = []

    def __call__(self, argv):
        if "systemctl" in argv:
            self.calls.append(argv[argv.index("systemctl"):])
            return 0, "0\n" if "--property=MainPID" in argv else "", ""
        return run_command(argv)


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
            f = _switch.inspect(a, "sglang", devices, run=systemctl)
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
        outcome = _switch.Worker(plan, run=systemctl).go()
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
        assert _switch.read_json(os.path.join(plan["state_dir"], "switch.json")) == json.loads(json.dumps(outcome))
    finally:
        daemon.kill()
        daemon.wait()


def test_preflight_problems(spawn, tmp_path):
    port = free_port()
    other = spawn.python("import http.server, sys; http.server.HTTPServer(('127.0.0.1', %d), "
                         "http.server.BaseHTTPRequestHandler).serve_forever()" % port)
    wait_for(lambda: _discover.listeners(port, _procfs.snapshot()), 10)
    found = _switch.inspect(port, "sglang", [str(tmp_path / "nvidia*")], run=Systemctl())
    assert found["owner"] == "adhoc"
    assert len(found["problems"]) == 1 and "not an SGLang server" in found["problems"][0]
    assert str(other.pid) in found["problems"][0]
    empty = _switch.inspect(free_port(), "sglang", run=Systemctl())
    assert empty["owner"] is None and empty["family"] == [] and empty["problems"] == []


def test_the_lock_allows_one_switch_per_port(tmp_path, monkeypatch):
    monkeypatch.setattr(_switch, "LOCK_WAIT", 0.3)
    state, other = str(tmp_path / "state" / "1234"), str(tmp_path / "state" / "1235")
    assert not os.path.exists(state)
    fd = _switch.take_lock(state)
    try:
        assert _switch.take_lock(state) is None
        os.close(_switch.take_lock(other))
        plan = dict(id="t2", action="start", port=1234, unit="sglang.service", unit_name="sglang",
                    state_dir=state, drain=1.0, release_strays=False, devices=[])
        outcome = _switch.Worker(plan, run=Systemctl()).go()
        assert outcome["finished"] and "holds the lock" in outcome["error"] and outcome["steps"] == []
    finally:
        os.close(fd)
    os.close(_switch.take_lock(state))


def test_launch_runs_detached_in_a_session_of_its_own_and_reports(tmp_path):
    """The worker outlives its launcher, and its failure (no systemd here) comes back through the outcome file."""
    plan = dict(id="t3", action="start", port=free_port(), unit="inferops-test-none.service",
                unit_name="inferops-test-none", state_dir=str(tmp_path / "state"), drain=1.0,
                release_strays=False, devices=[str(tmp_path / "nvidia*")])
    script = ("import sys; sys.path.insert(0, %r); from ansible_collections.inferops.sglang.plugins.module_utils "
              "import _switch; print(_switch.launch(%r, 0)[1][0])" % (COLLECTIONS, plan))
    launcher = subprocess.run([sys.executable, "-c", script], stdout=subprocess.PIPE, universal_newlines=True, check=True)
    assert launcher.stdout.strip() == sys.executable  # the session path, not systemd-run
    outcome = _switch.wait(plan["state_dir"], "t3", 30)
    assert outcome["finished"] and outcome["pid"] != os.getpid()
    assert [s["step"] for s in outcome["steps"]] == ["verify zero", "release GPUs"]
    assert "systemctl start inferops-test-none.service failed" in outcome["error"]
    assert os.stat(os.path.join(plan["state_dir"], "switch.json")).st_mode & 0o777 == 0o600
    assert os.stat(plan["state_dir"]).st_mode & 0o777 == 0o700


def test_wait_notices_a_worker_that_died(tmp_path):
    state = tmp_path / "state"
    state.mkdir()
    gone = subprocess.Popen(["true"])
    gone.wait()
    _switch.write_json(str(state / "switch.json"), {"id": "t4", "pid": gone.pid, "starttime": 1, "finished": False})
    out = _switch.wait(str(state), "t4", 5)
    assert "ended without finishing" in out["error"]
    with pytest.raises(TimeoutError):
        _switch.wait(str(state), "other", 0.3)


def test_back_to_the_capture_starts_it_exactly_as_it_ran(shell, tmp_path):
    """A rollback: the captured command again, with its argv (argv[0] as typed), environment, cwd and log."""
    port = free_port()
    shell("cd %s && export PATH=%s:$PATH && INFEROPS_MARK='a b \"c\"' nohup %s > srv.log 2>&1 & wait" % (
        tmp_path, os.path.dirname(sys.executable), server_cmd(port, "python3")))
    (pid,) = wait_listening(port)
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    cap = _discover.capture(pid)
    assert cap["stdout"] == cap["stderr"] == str(tmp_path / "srv.log")
    _switch.write_json(str(state / "capture.json"), cap)
    _signals.stop([_procfs.read(pid)], grace=10)
    wait_for(lambda: not _discover.listeners(port, _procfs.snapshot()), 10)
    size = (tmp_path / "srv.log").stat().st_size
    plan = dict(id="t5", action="rollback", target="capture", port=port, unit="sglang.service", unit_name="sglang",
                state_dir=str(state), drain=1.0, release_strays=False, devices=[str(tmp_path / "nvidia*")])
    systemctl = Systemctl()
    outcome = _switch.Worker(plan, run=systemctl).go()
    assert outcome["error"] is None, outcome
    assert [s["step"] for s in outcome["steps"]] == ["stop server", "verify zero", "release GPUs", "start captured command"]
    assert ["systemctl", "stop", "sglang.service"] in systemctl.calls
    (again,) = wait_listening(port)
    assert again == outcome["pid_started"] != pid
    assert _procfs.read(again).argv == cap["argv"] and cap["argv"][0] == "python3"
    assert _procfs.environ(again) == cap["environment"] and _procfs.environ(again)["INFEROPS_MARK"] == 'a b "c"'
    assert os.readlink("/proc/%d/cwd" % again) == str(tmp_path)
    assert os.readlink("/proc/%d/fd/1" % again) == str(tmp_path / "srv.log")
    wait_for(lambda: (tmp_path / "srv.log").stat().st_size > size, 10)  # appended, not truncated
    assert (tmp_path / "srv.log").read_text().count("server_args=") == 2
    proc = _procfs.read(again)
    assert proc.sid == again, "a session of its own, as nohup and a closed terminal leave it"


def _stop_step(port, tmp_path, drain):
    plan = dict(id="t6", action="switch", port=port, unit="sglang.service", unit_name="sglang",
                state_dir=str(tmp_path / "state"), drain=drain, release_strays=False, devices=[str(tmp_path / "nvidia*")])
    os.makedirs(plan["state_dir"])
    outcome = _switch.Worker(plan, run=Systemctl()).go()
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


RACER = """
import json, os, sys, time
sys.path.insert(0, %r)
from ansible_collections.inferops.sglang.plugins.module_utils import _switch
plan, go = json.loads(sys.argv[1]), float(sys.argv[2])
since = time.time()
while time.time() < go:
    pass
run_id, argv = _switch.launch(plan, since)
print(json.dumps(dict(mine=plan["id"], reported=run_id, launched=argv is not None,
                      outcome=_switch.wait(plan["state_dir"], run_id, 60))))
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
    assert sorted(os.listdir(state)) == sorted(["switch.json", "switch.lock", "switch-plan-%s.json" % won["mine"]])


def test_a_run_begun_before_a_switch_finished_reports_it_instead_of_starting_another(tmp_path):
    state = tmp_path / "state"
    state.mkdir()
    since = __import__("time").time()
    _switch.write_json(str(state / "switch.json"), {"id": "done", "began": since + 0.5, "finished": True, "error": None})
    plan = dict(id="late", action="switch", port=free_port(), unit="sglang.service", unit_name="sglang",
                state_dir=str(state), drain=1.0, release_strays=False, devices=[str(tmp_path / "nvidia*")])
    assert _switch.launch(plan, since) == ("done", None)
    assert _switch.launch(plan, since + 1.0)[0] == "late"  # one finished before this run began: a new switch


LOOK = """
import json, sys
sys.path.insert(0, %r)
from ansible_collections.inferops.sglang.plugins.module_utils import _discover, _procfs, _switch
procs = _procfs.snapshot()
print(json.dumps(dict(listeners=_discover.listeners(%d, procs), hidden=_discover.hidden_listeners(%d, procs),
                      problems=_switch.inspect(%d, "sglang", [], procs, run=lambda argv: (0, "0", ""))["problems"])))
"""


def test_a_listener_root_cannot_inspect_is_named_as_such(tmp_path):
    """Another user's server, looked at by a root without CAP_SYS_PTRACE over it (root of a user namespace, as in
    a default podman container): its open files cannot be read, and the port is said to be in use, not free."""
    port = free_port()
    other = subprocess.Popen(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "/usr/bin/python3", "-c",
                              "import socket, time; s = socket.socket(); s.bind(('127.0.0.1', %d)); s.listen(); "
                              "time.sleep(600)" % port], stderr=subprocess.PIPE)
    try:
        wait_for(lambda: _discover.listening_inodes(port), 10)
        look = subprocess.run(["unshare", "--user", "--map-root-user", sys.executable, "-c",
                               LOOK % (COLLECTIONS, port, port, port)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True, check=False)
        assert look.returncode == 0, look.stderr
        seen = json.loads(look.stdout)
        assert seen["listeners"] == []  # it cannot read the server's open files
        (hidden,) = seen["hidden"]
        assert hidden["uid"] == 65534 and other.pid in hidden["unreadable"]
        assert hidden["inode"] == int(list(_discover.listening_inodes(port))[0])
        (problem,) = seen["problems"]
        assert problem.startswith("port %d is in use, by a listening socket that no process this user can inspect "
                                  "holds" % port) and "owned by uid 65534 (nobody)" in problem
        assert "maybe pid " in problem and str(other.pid) in problem
    finally:
        other.kill()
        other.wait()
