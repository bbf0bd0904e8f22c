"""The switch's detached worker on real process trees: the family and its strays stopped among decoys, the drain."""
import contextlib
import json
import os
import socket
import stat
import subprocess
import threading
import time

import pytest

from ansible_collections.inferops.sglang.plugins.module_utils._server import (
    listeners as _listeners, port_units as _port_units)
from ansible_collections.inferops.sglang.plugins.module_utils import _state_dir
from ansible_collections.inferops.sglang.plugins.module_utils._host import files as _files, procfs as _procfs
from ansible_collections.inferops.sglang.plugins.module_utils._switch import (
    preflight as _preflight, worker as _switch_worker)
from ansible_collections.inferops.sglang.plugins.module_utils._server.readiness import Server

from tests.unit.conftest import free_port, wait_for
from .. import programs
from ..conftest import Systemctl, Systemd, nobody_kin, nobody_kin_running, server_cmd, wait_listening


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
                    _procfs.descendants(snap, _listeners.listeners(b, snap))]
            rest = [p.pid for p in snap.values() if p.cmdline.startswith(("tail -f", "watch")) and p.sid == session]
            return (snap, tree, rest) if len(rest) == 2 and len(tree) >= 4 else None
        before_b, b_tree, others = wait_for(bystanders, 10)

        plan = dict(id="t1", action="switch", port=a, unit="sglang.service", unit_name="sglang",
                    state_dir=str(tmp_path / "state"), drain=5.0, release_strays=True, devices=devices,
                    gpus=found["gpus"])  # the module's preflight's, as sglang_switch's plan carries them
        os.makedirs(plan["state_dir"])
        outcome = _switch_worker.Worker(plan, run=systemctl).go()
        assert outcome["error"] is None, outcome
        assert [s["step"] for s in outcome["steps"]] == [
            "stop wrapper", "stop server", "verify zero", "release GPUs", "start unit"]
        assert outcome["downtime"] > 0 and outcome["finished"]
        assert not [i for i in family if _procfs.is_alive(i)]
        assert _listeners.listeners(a, _procfs.snapshot()) == []
        assert stray.wait(timeout=5) == -15
        assert daemon.poll() is None
        assert all(_procfs.is_alive((pid, before_b[pid].starttime)) for pid in b_tree + others)
        assert ["systemctl", "start", "--no-block", "sglang.service"] in systemctl.calls
        assert _files.read_json(os.path.join(plan["state_dir"], "switch.json")) == json.loads(json.dumps(outcome))
    finally:
        daemon.kill()
        daemon.wait()


def test_a_stop_alone_stops_the_server_and_frees_its_gpus_and_starts_nothing(shell, tmp_path):
    """start=false (one rank of a multi-node server, whose ranks start together in a later switch): the family stopped
    (drained), zero verified, the GPUs released; the unit not started; when the stop began kept (a group's downtime
    counts from rank 0's)."""
    port = free_port()
    shell("%s > s.log 2>&1 & wait" % server_cmd(port))
    wait_listening(port)
    plan = dict(id="t8", action="stop", port=port, unit="sglang.service", unit_name="sglang",
                state_dir=str(tmp_path / "state"), drain=5.0, release_strays=False, devices=[str(tmp_path / "nvidia*")])
    os.makedirs(plan["state_dir"])
    systemctl = Systemctl()
    t0 = time.time()
    outcome = _switch_worker.Worker(plan, run=systemctl).go()
    assert outcome["error"] is None, outcome
    assert [s["step"] for s in outcome["steps"]] == ["stop wrapper", "stop server", "verify zero", "release GPUs"]
    assert not [c for c in systemctl.calls if "start" in c], systemctl.calls
    assert "started_at" not in outcome and t0 <= outcome["stop_began_at"] <= time.time()
    assert _listeners.listeners(port, _procfs.snapshot()) == []


def _events(path):
    return [json.loads(line)["event"] for line in path.read_text().splitlines()] if path.exists() else []


@pytest.mark.parametrize("version, follower_exit", [("0.5.15", "3"), ("0.5.23", "0")])
def test_a_groups_rank_0_ends_on_its_own_and_its_shutdown_ends_the_other_ranks(shell, tmp_path, version, follower_exit):
    """Rank 0 of a two-node server stopped alone (rank=0): once drained it is left to end on its own. SGLang's
    watchdog (here every 0.5 s) then sends its ShutdownReq to every rank and ends its tree, so rank 1 ends with that
    shutdown, as its version does (0.5.15: uvicorn's startup failure, 3; 0.5.23: 0), not with a lost peer (a crash
    sleep, then SIGKILL; a real rank may instead wait in a collective). The switch signals nothing of rank 1."""
    ports, addr = [free_port(), free_port()], "127.0.0.1:%d" % free_port()
    (tmp_path / "r1nvidia0").touch()  # rank 1's own GPUs, not the ones the stop releases

    def rank(n):
        return ("SGLANG_DOUBLE_VERSION=%s SGLANG_DOUBLE_WATCHDOG_SECONDS=0.5 SGLANG_DOUBLE_STATE_FILE=r%d.jsonl %s "
                "%s --nnodes 2 --node-rank %d --dist-init-addr %s > r%d.log 2>&1" % (
                    version, n, "SGLANG_DOUBLE_DEVICES=%s" % (tmp_path / "r1nvidia*") if n else "",
                    server_cmd(ports[n]), n, addr, n))
    shell(rank(0) + " & wait")
    shell(rank(1) + "; echo $? > r1.exit")
    wait_for(lambda: Server("http://127.0.0.1:%d" % ports[0]).request("/health").status == 200, 20)
    plan = dict(id="t9", action="stop", rank=0, port=ports[0], unit="sglang.service", unit_name="sglang",
                state_dir=str(tmp_path / "state"), drain=30.0, release_strays=False, devices=[str(tmp_path / "nvidia*")])
    os.makedirs(plan["state_dir"])
    outcome = _switch_worker.Worker(plan, run=Systemctl()).go()
    assert outcome["error"] is None, outcome
    stop = [s for s in outcome["steps"] if s["step"] == "stop server"][0]
    assert not stop["escalated"] and stop["timings"]["first_signal"] < 20, stop  # its own end, within its grace
    wait_for((tmp_path / "r1.exit").exists, 20)
    assert "shutdown_broadcast" in _events(tmp_path / "r0.jsonl")
    assert "shutdown_received" in _events(tmp_path / "r1.jsonl"), _events(tmp_path / "r1.jsonl")
    assert "peer_lost" not in _events(tmp_path / "r1.jsonl")
    assert (tmp_path / "r1.exit").read_text().strip() == follower_exit


def test_a_stop_alone_stops_the_unit_still_starting(tmp_path, monkeypatch):
    """start=false with the unit still loading (nothing listens yet): the unit stopped (a rank's unit, before its
    group starts again), nothing started."""
    monkeypatch.setattr(_switch_worker, "STOP_GRACE", 1.0)
    systemd = Stopping(0.2, **{"sglang.service": dict(ActiveState="activating", SubState="start",
                                                      ExecMainStartTimestampMonotonic="5000",
                                                      ActiveEnterTimestampMonotonic="0")})
    plan = dict(_rollback_plan(tmp_path), action="stop", target="unit")
    outcome = _switch_worker.Worker(plan, run=systemd).go()
    assert outcome["error"] is None, outcome
    assert [s["step"] for s in outcome["steps"]] == ["stop server", "verify zero", "release GPUs"]
    assert systemd.calls == [["stop", "--no-block", "sglang.service"]]


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
    wait_for(lambda: _listeners.connections(port), 5)
    stop = _stop_step(port, tmp_path, drain=30.0)
    client.join(30)
    assert [a.status for a in answers] == [200]  # answered in full: 60 tokens x 0.02 s before the kill
    assert answers[0].json()["meta_info"]["completion_tokens"] == 60
    assert stop["drained"] and stop["escalated"]
    assert stop["seconds"] >= 0.5 and stop["timings"]["first_signal"] < 30  # neither before the answer nor the budget
    assert _listeners.listeners(port, _procfs.snapshot()) == []


def test_the_switch_of_an_ipv6_only_server(shell, tmp_path):
    """`--host ::` listens on IPv6 only (a real 0.5.15 does): the drain is watched on [::1] (a 503 there, then no
    connection), verify zero finds the port free, the unit is started."""
    port = free_port()
    shell("SGLANG_DOUBLE_WATCHDOG_SECONDS=60 %s --host :: > s.log 2>&1 & wait" % server_cmd(port))
    wait_listening(port)
    assert _listeners.local_url(port) == "http://[::1]:%d" % port
    server = Server(_listeners.local_url(port))
    wait_for(lambda: server.request("/health").status == 200, 15)
    stop = _stop_step(port, tmp_path, drain=30.0)
    assert stop["drained"] and stop["timings"]["first_signal"] < 10, stop
    assert _listeners.listeners(port, _procfs.snapshot()) == []


def test_a_port_closed_by_the_sigterm_counts_as_drained(run, tmp_path):
    """A SIGTERM before the server's first generate (seen on a real 0.5.15): the port closes at once, /health never
    answers 503, the process would live two more minutes. The switch ends it after a short grace, not at the end of
    the drain budget."""
    port = free_port()
    p = run(programs.UVICORN_BEFORE_GENERATE, str(port), "sglang.launch_server", "--port", str(port))[0]
    stop = _stop_step(port, tmp_path, drain=30.0)
    assert stop["drained"] and stop["escalated"], stop
    assert _switch_worker.PORT_CLOSED_GRACE <= stop["timings"]["first_signal"] < 10, stop
    assert p.wait(timeout=10) == -9


def test_a_server_that_ignores_sigterm_gets_the_whole_drain_budget(shell, tmp_path):
    port = free_port()
    shell("SGLANG_DOUBLE_FAULTS=ignore_sigterm %s > s.log 2>&1 & wait" % server_cmd(port))
    wait_listening(port)
    server = Server("http://127.0.0.1:%d" % port)
    wait_for(lambda: server.request("/health").status == 200, 15)
    stop = _stop_step(port, tmp_path, drain=1.5)
    assert not stop["drained"] and stop["escalated"]
    assert stop["timings"]["first_signal"] >= 1.5


def test_the_switch_never_signals_another_users_kin(shell, tmp_path, folders):
    """nobody's processes titled sglang::scheduler, or of the server's interpreter with multiprocessing in their argv,
    started after a root server in its session: the switch stops the server's family, and they live on."""
    port = free_port()
    shell("%s > s.log 2>&1 & sleep 0.5; %s; wait" % (server_cmd(port), nobody_kin(folders)))
    (server,) = wait_listening(port)
    ident = _procfs.read(server).identity
    theirs = [p.identity for p in wait_for(nobody_kin_running, 10)]
    plan = dict(id="t4", action="switch", port=port, unit="sglang.service", unit_name="sglang",
                state_dir=str(tmp_path / "state"), drain=5.0, release_strays=True, devices=[str(tmp_path / "nvidia*")],
                gpus=[0])
    os.makedirs(plan["state_dir"])
    outcome = _switch_worker.Worker(plan, run=Systemctl()).go()
    assert outcome["error"] is None, outcome
    assert not _procfs.is_alive(ident)
    assert all(_procfs.is_alive(i) for i in theirs), "another user's processes are never the server's family"


def test_a_rollback_puts_back_the_units_the_switch_took_over_and_starts_the_one_that_ran_the_server(tmp_path):
    """The server ran under the operator's unit (replaced: disabled, stopped by the switch), beside another unit the
    switch disabled: the rollback writes their files back, enables both again and starts the one that ran the
    server, not the captured command."""
    state = str(tmp_path / "state")
    etc = tmp_path / "etc"
    etc.mkdir()
    kimi, other = str(etc / "kimi.service"), str(etc / "other.service")
    for path in (kimi, other):
        with open(path, "w") as f:
            f.write("[Service]\nExecStart=/v/sglang serve\nRestart=always\n")
    units = [dict(unit="kimi.service", path=kimi, files=[kimi], unit_file_state="enabled", active_state="active",
                  holds_port=True, action="replace"),
             dict(unit="other.service", path=other, files=[other], unit_file_state="enabled", active_state="inactive",
                  holds_port=False, action="replace")]
    systemd = Systemd(**{"kimi.service": dict(UnitFileState="enabled", ActiveState="active"),
                         "other.service": dict(UnitFileState="enabled")})
    _port_units.take_over(units, state, systemd)
    with open(other, "w") as f:
        f.write("# changed since\n")
    systemd.calls = []
    plan = dict(id="r1", action="rollback", target="capture", port=free_port(), unit="sglang.service",
                unit_name="sglang", state_dir=state, drain=5.0, release_strays=False, devices=[str(tmp_path / "nvidia*")])
    outcome = _switch_worker.Worker(plan, run=systemd).go()
    assert outcome["error"] is None, outcome
    assert [s["step"] for s in outcome["steps"]] == ["stop server", "verify zero", "release GPUs", "restore units",
                                                     "start unit"]
    assert outcome["unit_started"] == "kimi.service" and "pid_started" not in outcome
    assert outcome["units_restored"] == ["kimi.service", "other.service"]
    assert open(other).read() == "[Service]\nExecStart=/v/sglang serve\nRestart=always\n"
    assert systemd.calls == [["stop", "sglang.service"], ["daemon-reload"], ["enable", "kimi.service"],
                             ["enable", "other.service"], ["reset-failed", "kimi.service"],
                             ["start", "--no-block", "kimi.service"]]
    assert not os.path.exists(os.path.join(state, "units.json"))


def test_a_rollback_of_a_restart_that_changed_the_unit_puts_its_files_back_and_starts_it(tmp_path):
    """The files a failed restart changed, kept as they served (previous-unit.json): written back with their modes,
    one the restart added removed, systemd reloaded, the unit enabled and started; not the captured command."""
    state = str(tmp_path / "state")
    os.makedirs(state)
    unit_file, env_file, added = (str(tmp_path / n) for n in ("sglang.service", "sglang.env", "added.conf"))
    for path, text in ((unit_file, "[Service]\nExecStart=/v/python -m sglang.launch_server --bad\n"),
                       (env_file, "BAD=1\n"), (added, "x\n")):
        with open(path, "w") as f:
            f.write(text)
    kept = _state_dir.previous(state)
    with open(kept, "w") as f:
        json.dump(dict(run="s1", unit="sglang.service", files=[
            dict(path=unit_file, mode=0o644, text="[Service]\nExecStart=/v/python -m sglang.launch_server\n"),
            dict(path=env_file, mode=0o600, text="GOOD=1\n"), dict(path=added, mode=None, text=None)]), f)
    systemd = Systemd(**{"sglang.service": dict(UnitFileState="disabled", ActiveState="failed")})
    plan = dict(_rollback_plan_in(state), previous=kept)
    outcome = _switch_worker.Worker(plan, run=systemd).go()
    assert outcome["error"] is None, outcome
    assert [s["step"] for s in outcome["steps"]] == ["stop server", "verify zero", "release GPUs",
                                                     "restore previous unit", "start unit"]
    assert outcome["unit_started"] == "sglang.service" and outcome["previous_unit"] is True
    assert "pid_started" not in outcome
    assert open(unit_file).read() == "[Service]\nExecStart=/v/python -m sglang.launch_server\n"
    assert open(env_file).read() == "GOOD=1\n" and stat.S_IMODE(os.stat(env_file).st_mode) == 0o600
    assert not os.path.exists(added) and not os.path.exists(kept)
    assert systemd.calls[-4:] == [["daemon-reload"], ["enable", "sglang.service"], ["reset-failed", "sglang.service"],
                                  ["start", "--no-block", "sglang.service"]]


@pytest.mark.parametrize("daemon_changed", [True, False])
def test_a_rollback_to_the_previous_unit_restarts_its_weight_cache_only_when_the_daemons_unit_changed(
        tmp_path, daemon_changed):
    """With a weight cache: a failed restart that changed only the server's flags is rolled back onto the daemon that
    kept serving (no step touches it); one that changed what the daemon holds puts the daemon's unit back too, and
    stops the daemon before the unit's start starts it again, as it was. A rollback to the captured command stops it
    (test below)."""
    state = str(tmp_path / "state")
    os.makedirs(state)
    unit_file, daemon_file = str(tmp_path / "sglang.service"), str(tmp_path / "sglang-weights.service")
    for path in (unit_file, daemon_file):
        with open(path, "w") as f:
            f.write("[Service]\nExecStart=/v/python -m x --new\n")
    kept = _state_dir.previous(state)
    files = [dict(path=unit_file, mode=0o644, text="[Service]\nExecStart=/v/python -m x\n")]
    if daemon_changed:
        files.append(dict(path=daemon_file, mode=0o644, text="[Service]\nExecStart=/v/python -m d\n"))
    with open(kept, "w") as f:
        json.dump(dict(run="s1", unit="sglang.service", files=files), f)
    systemd = Systemd(**{"sglang.service": dict(UnitFileState="enabled", ActiveState="failed"),
                         "sglang-weights.service": dict(ActiveState="active", MainPID="4242")})
    plan = dict(_rollback_plan_in(state), previous=kept,
                weights=dict(name="sglang-weights", unit="sglang-weights.service", restart=False))
    outcome = _switch_worker.Worker(plan, run=systemd).go()
    assert outcome["error"] is None, outcome
    steps = ["stop server", "verify zero", "release GPUs", "restore previous unit"]
    assert [s["step"] for s in outcome["steps"]] == steps + (["stop weight cache"] if daemon_changed else []) + [
        "start unit"]
    assert (["stop", "sglang-weights.service"] in systemd.calls) is daemon_changed
    assert systemd.calls[-1] == ["start", "--no-block", "sglang.service"]


def test_a_rollback_to_the_captured_command_stops_the_weight_cache(tmp_path):
    """The captured command reads its weights itself: the daemon's GPU memory is freed before it starts."""
    systemd = Systemd(**{"sglang.service": dict(UnitFileState="enabled", ActiveState="failed"),
                         "sglang-weights.service": dict(ActiveState="active", MainPID="4242")})
    plan = dict(_rollback_plan(tmp_path), weights=dict(name="sglang-weights", unit="sglang-weights.service",
                                                       restart=False))
    outcome = _switch_worker.Worker(plan, run=systemd).go()
    steps = [s["step"] for s in outcome["steps"]]
    assert steps[:4] == ["stop server", "verify zero", "stop weight cache", "release GPUs"], outcome
    assert ["stop", "sglang-weights.service"] in systemd.calls
    assert outcome["steps"][2]["main_pid"] == "4242"


class StuckStopping(Systemd):
    """A unit whose start failed and whose server ignores SIGTERM (a real SGLang whose port was taken): systemd's stop
    sends SIGTERM and waits out TimeoutStopSec; only `systemctl kill --signal=SIGKILL` ends it."""

    def __call__(self, argv):
        args = argv[argv.index("systemctl") + 1:] if "systemctl" in argv else []
        if args[:1] == ["stop"]:
            self.calls.append(args)
            self.units[args[-1]].update(ActiveState="deactivating", SubState="stop-sigterm")
            return 0, "", ""
        if args[:1] == ["kill"]:
            self.calls.append(args)
            self.units[args[-1]].update(ActiveState="inactive", SubState="dead", MainPID="0")
            return 0, "", ""
        return Systemd.__call__(self, argv)


def _rollback_plan(tmp_path):
    state = str(tmp_path / "state")
    os.makedirs(state)
    return _rollback_plan_in(state)


def _rollback_plan_in(state):
    return dict(id="r2", action="rollback", target="capture", port=free_port(), unit="sglang.service", unit_name="sglang",
                state_dir=state, drain=60.0, release_strays=False, devices=[os.path.join(state, "nvidia*")])


def test_a_unit_that_never_served_is_killed_after_a_short_grace_and_the_step_says_so(tmp_path, monkeypatch):
    """The rollback of a start that failed: the unit is still deactivating (its server ignores SIGTERM) and never
    became active. The stop does not wait out TimeoutStopSec (nor the drain budget): SIGKILL to its cgroup after
    STOP_GRACE, with the stop job queued first (so systemd does not count the SIGKILL as a crash to restart)."""
    monkeypatch.setattr(_switch_worker, "STOP_GRACE", 1.0)
    systemd = StuckStopping(**{"sglang.service": dict(ActiveState="activating", SubState="start-post",
                                                      ExecMainStartTimestampMonotonic="5000",
                                                      ActiveEnterTimestampMonotonic="1000")})
    worker = _switch_worker.Worker(_rollback_plan(tmp_path), run=systemd)
    t0 = time.monotonic()
    step = worker.stop_unit("sglang.service")
    assert 1.0 <= time.monotonic() - t0 < 5
    assert systemd.calls == [["stop", "--no-block", "sglang.service"], ["kill", "--signal=SIGKILL", "sglang.service"]]
    assert step["escalated"] and not step["served"] and step["unit_state"] == "activating/start-post"
    # the whole reading the branch was chosen on, in the step (the record shows why it took the time it took)
    assert step["unit_read"]["ExecMainStartTimestampMonotonic"] == "5000", step
    assert step["unit_read"]["ActiveEnterTimestampMonotonic"] == "1000", step
    assert step["escalation"].startswith("sglang.service never served and was still activating 1 s after SIGTERM: "
                                         "SIGKILL to its cgroup (systemctl kill --signal=SIGKILL)")


@contextlib.contextmanager
def listening(port):
    """A socket listening on 127.0.0.1:port that answers nothing."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", port))
    sock.listen(8)
    try:
        yield sock
    finally:
        sock.close()


class Stopping(Systemd):
    """A unit that served: systemd's stop sends SIGTERM and the server drains; it ends on its own `ends_after`
    seconds after the stop (never: None), or at `systemctl kill --signal=SIGKILL`."""

    def __init__(self, ends_after, **units):
        Systemd.__init__(self, **units)
        self.ends_after = ends_after
        self.stop_at = None

    def __call__(self, argv):
        args = argv[argv.index("systemctl") + 1:] if "systemctl" in argv else []
        unit = args[-1] if args else None
        if args[:1] == ["show"] and self.stop_at is not None and self.ends_after is not None \
                and time.monotonic() - self.stop_at >= self.ends_after:
            self.units[unit].update(ActiveState="inactive", SubState="dead")
        if args[:1] == ["stop"]:
            self.calls.append(args)
            self.stop_at = time.monotonic()
            self.units[unit].update(ActiveState="deactivating", SubState="stop-sigterm")
            return 0, "", ""
        if args[:1] == ["kill"]:
            self.calls.append(args)
            self.units[unit].update(ActiveState="failed", SubState="failed")
            return 0, "", ""
        return Systemd.__call__(self, argv)


SERVING = dict(ActiveState="active", SubState="running", ExecMainStartTimestampMonotonic="1000",
               ActiveEnterTimestampMonotonic="5000")


def test_a_unit_that_served_and_ends_on_its_own_is_not_killed(tmp_path):
    systemd = Stopping(0.3, **{"sglang.service": dict(SERVING)})
    plan = _rollback_plan(tmp_path)
    with listening(plan["port"]):  # in flight all along: Drained never says so
        step = _switch_worker.Worker(plan, run=systemd).stop_unit("sglang.service")
    assert systemd.calls == [["stop", "--no-block", "sglang.service"]]
    assert step.pop("unit_read")["ActiveEnterTimestampMonotonic"] == SERVING["ActiveEnterTimestampMonotonic"]
    assert step == {"unit": "sglang.service", "unit_state": "active/running", "served": True}


def test_a_unit_that_served_is_killed_once_drained_not_after_timeoutstopsec(tmp_path):
    """A unit that became active moments ago has not warmed up: a real 0.5.15 given SIGTERM then closes its port at
    once and lives on for its warm-up's 120 s (systemd's own stop would wait TimeoutStopSec). Its port closed, no
    connection open: drained, so SIGKILL to its cgroup, as the hand-launched server's family gets."""
    systemd = Stopping(None, **{"sglang.service": dict(SERVING)})
    plan = _rollback_plan(tmp_path)  # nothing listens on its port
    t0 = time.monotonic()
    step = _switch_worker.Worker(plan, run=systemd).stop_unit("sglang.service")
    assert time.monotonic() - t0 < 10
    assert systemd.calls == [["stop", "--no-block", "sglang.service"], ["kill", "--signal=SIGKILL", "sglang.service"]]
    assert step["served"] and step["drained"] and step["escalated"], step
    assert step["escalation"] == ("sglang.service served, and nothing was in flight: SIGKILL to its cgroup "
                                  "(systemctl kill --signal=SIGKILL)")


def test_a_groups_rank_0_unit_drained_is_left_to_end_on_its_own(tmp_path):
    """The same unit as rank 0 of a multi-node server (rank=0): drained at once (nothing listens), it ends on its own
    2 s later (its shutdown sent to the other ranks meanwhile), and gets no SIGKILL."""
    systemd = Stopping(2.0, **{"sglang.service": dict(SERVING)})
    step = _switch_worker.Worker(dict(_rollback_plan(tmp_path), rank=0), run=systemd).stop_unit("sglang.service")
    assert systemd.calls == [["stop", "--no-block", "sglang.service"]]
    assert step["served"] and not step.get("escalated"), step


class EndsAsKilled(Stopping):
    """A unit that served, drained, and ended on its own just as its SIGKILL went out: systemd unloaded it, and the
    kill answers "not loaded" (seen under a loaded CI)."""

    def __call__(self, argv):
        if "kill" in argv:
            self.calls.append(argv[argv.index("systemctl") + 1:])
            self.units[argv[-1]].update(ActiveState="inactive", SubState="dead")
            return 1, "", "Failed to kill unit %s: Unit %s not loaded.\n" % (argv[-1], argv[-1])
        return Stopping.__call__(self, argv)


def test_a_unit_that_ended_on_its_own_as_its_sigkill_went_out_is_stopped(tmp_path):
    systemd = EndsAsKilled(None, **{"sglang.service": dict(SERVING)})
    plan = _rollback_plan(tmp_path)  # nothing listens on its port: drained at once
    step = _switch_worker.Worker(plan, run=systemd).stop_unit("sglang.service")
    assert systemd.calls == [["stop", "--no-block", "sglang.service"], ["kill", "--signal=SIGKILL", "sglang.service"]]
    assert step.pop("unit_read")["ActiveState"] == "active"
    assert step == {"unit": "sglang.service", "unit_state": "active/running", "served": True, "drained": True}


def test_the_rollback_of_a_failed_run_stops_its_unit_within_the_grace_though_it_became_active(tmp_path, monkeypatch):
    """The rollback of a run whose unit did not serve in time (faults F6c: the port was taken while it loaded): its
    gate passed late, moments before the rollback, and its server ignores SIGTERM, a request in flight. systemd says
    active, but the run failed and no client was sent to it (unit_served false): SIGKILL after STOP_GRACE, not after
    the drain budget (there 120 s, the unit's TimeoutStopSec: the rollback's stop that took 120.5 s)."""
    monkeypatch.setattr(_switch_worker, "STOP_GRACE", 1.0)
    systemd = Stopping(None, **{"sglang.service": dict(SERVING)})
    plan = dict(_rollback_plan(tmp_path), drain=30.0, unit_served=False)
    with listening(plan["port"]) as sock:
        client = socket.create_connection(("127.0.0.1", plan["port"]))  # in flight: never drained
        try:
            sock.accept()
            t0 = time.monotonic()
            step = _switch_worker.Worker(plan, run=systemd).stop_unit("sglang.service", plan["unit_served"])
            took = time.monotonic() - t0
        finally:
            client.close()
    assert 1.0 <= took < 5, (took, step)
    assert systemd.calls == [["stop", "--no-block", "sglang.service"], ["kill", "--signal=SIGKILL", "sglang.service"]]
    assert not step["served"] and step["escalated"] and step["unit_read"]["ActiveState"] == "active", step
    assert step["escalation"].startswith("sglang.service served no client (its run failed) and was still active 1 s "
                                         "after SIGTERM: SIGKILL to its cgroup"), step


def test_a_rollback_passes_the_failed_runs_word_to_the_stop(tmp_path, monkeypatch):
    """back() gives stop_unit the plan's unit_served (the module's option), unset for a rollback on purpose."""
    seen = []
    monkeypatch.setattr(_switch_worker.Worker, "stop_unit", lambda self, unit, served=None: seen.append(served) or {})
    for value in (False, None):
        plan = _rollback_plan(tmp_path / str(value))
        if value is not None:
            plan["unit_served"] = value
        worker = _switch_worker.Worker(plan, run=Systemd())
        monkeypatch.setattr(_switch_worker._preflight, "vacant", lambda now, procs: dict(now, owner="unit"))
        monkeypatch.setattr(worker, "verify_zero", lambda now, procs: {})
        monkeypatch.setattr(worker, "release", lambda now: {})
        monkeypatch.setattr(worker, "relaunch", lambda: {"pid": 1})
        worker.back({"owner": "unit"}, {})
    assert seen == [False, None]


def test_a_unit_that_served_is_killed_when_the_drain_budget_runs_out(tmp_path):
    systemd = Stopping(None, **{"sglang.service": dict(SERVING)})
    plan = dict(_rollback_plan(tmp_path), drain=1.0)
    with listening(plan["port"]) as sock:
        client = socket.create_connection(("127.0.0.1", plan["port"]))  # a request in flight, never answered
        try:
            sock.accept()
            step = _switch_worker.Worker(plan, run=systemd).stop_unit("sglang.service")
        finally:
            client.close()
    assert step["served"] and step["drained"] is False and step["escalated"], step
    assert "the drain budget (1 s) ran out" in step["escalation"]


@pytest.mark.parametrize("props", [dict(ActiveState="failed", SubState="failed"),
                                   dict(ActiveState="inactive", SubState="dead")])
def test_a_unit_that_is_down_gets_systemds_own_stop(tmp_path, props):
    """Nothing runs: the stop only cancels a restart that may be due."""
    systemd = Systemd(**{"sglang.service": props})
    step = _switch_worker.Worker(_rollback_plan(tmp_path), run=systemd).stop_unit("sglang.service")
    assert systemd.calls == [["stop", "sglang.service"]]
    assert step.pop("unit_read")["SubState"] == props["SubState"]
    assert step == {"unit": "sglang.service", "unit_state": "%s/%s" % (props["ActiveState"], props["SubState"])}


def test_a_rollback_stops_the_unit_though_another_program_holds_the_port_and_leaves_that_program_alone(
        tmp_path, run, monkeypatch):
    """A program that is not an SGLang server took the port while the unit loaded: the rollback stops the unit all the
    same (no "a server outside the unit already serves"), never touches that program, and says the port is still
    held rather than start the captured command onto it."""
    monkeypatch.setattr(_switch_worker, "STOP_GRACE", 1.0)
    monkeypatch.setattr(_switch_worker, "PORT_WAIT", 1.0)
    plan = _rollback_plan(tmp_path)
    holder = run(programs.PORT_HOLDER, str(plan["port"]))[0]
    systemd = StuckStopping(**{"sglang.service": dict(ActiveState="activating", SubState="auto-restart",
                                                      ExecMainStartTimestampMonotonic="5000",
                                                      ActiveEnterTimestampMonotonic="0")})
    outcome = _switch_worker.Worker(plan, run=systemd).go()
    assert systemd.calls == [["stop", "--no-block", "sglang.service"], ["kill", "--signal=SIGKILL", "sglang.service"]]
    assert [s["step"] for s in outcome["steps"]] == ["stop server"] and "note" not in outcome, outcome
    assert outcome["error"].startswith("RuntimeError: not zero: family pids [] alive, port %d held by ['%d (" % (
        plan["port"], holder.pid)), outcome["error"]
    assert holder.poll() is None


def test_a_release_of_strays_stops_the_servers_users_own_never_another_users_job(shell, run, tmp_path):
    """release_strays with a root server on GPU 0: root's own stray there is released; a job of nobody's on GPU 0
    lives on (another user's job is never the switch's to stop), unless the operator lists nobody in release_users."""
    port = free_port()
    shell("%s --tp 1 > s.log 2>&1 & wait" % server_cmd(port))
    wait_listening(port)
    gpu0 = str(tmp_path / "nvidia0")
    own = run(programs.HOLDER, gpu0)[0]
    theirs = subprocess.Popen(["bash", "-c", "exec 3<%s setpriv --reuid=65534 --regid=65534 --clear-groups sleep 600"
                               % gpu0], stdin=subprocess.DEVNULL)
    try:
        wait_for(lambda: _procfs.read(theirs.pid).uid == 65534 and _procfs.read(theirs.pid).cmdline.startswith("sleep"))
        found = _preflight.inspect(port, "sglang", [str(tmp_path / "nvidia*")], run=Systemctl())
        rows = dict((s["pid"], s) for s in found["strays"])
        assert rows[own.pid]["releasable"] is True and rows[theirs.pid]["releasable"] is False, rows
        listed = _preflight.inspect(port, "sglang", [str(tmp_path / "nvidia*")], run=Systemctl(),
                                    release_users=["nobody"])
        assert [s["releasable"] for s in listed["strays"] if s["pid"] == theirs.pid] == [True]
        plan = dict(id="t9", action="switch", port=port, unit="sglang.service", unit_name="sglang",
                    state_dir=str(tmp_path / "state"), drain=5.0, release_strays=True,
                    devices=[str(tmp_path / "nvidia*")], gpus=found["gpus"])
        detail = _switch_worker.Worker(plan, run=Systemctl()).release(dict(found, family=[]))
        assert detail["released"] == [own.pid] and own.wait(timeout=15) is not None
        assert theirs.poll() is None, "another user's job was stopped"
    finally:
        theirs.kill()
        theirs.wait()


def test_verify_zero_never_sweeps_the_tree_of_a_reused_pid(spawn):
    """The old server's pid now belongs to another process (another start time), with a child: neither is touched."""
    other = subprocess.Popen(["bash", "-c", "sleep 600 & wait"], start_new_session=True)
    spawn.procs.append(other)
    child = wait_for(lambda: [p for p in _procfs.snapshot().values() if p.ppid == other.pid], 10)[0]
    now = _procfs.read(other.pid)
    old = _procfs.Process(now.pid, now.ppid, now.pgid, now.sid, "S", now.starttime - 1, 0, "python3",
                          ["python3", "-m", "sglang.launch_server"], now.uid)
    plan = dict(id="t9", action="switch", port=free_port(), unit="sglang.service", unit_name="sglang",
                state_dir="/nonexistent", drain=1.0, release_strays=False, devices=[])
    done = _switch_worker.Worker(plan, run=Systemctl()).verify_zero(
        {"family": [], "owner": "adhoc", "server": {"pid": other.pid}}, {other.pid: old})
    assert done == {"left": 0, "orphans_killed": []}
    assert _procfs.is_alive(child.identity) and _procfs.is_alive(now.identity)
