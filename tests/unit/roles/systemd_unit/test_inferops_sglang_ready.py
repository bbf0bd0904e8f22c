"""The unit's readiness gate (roles/systemd_unit/files/inferops-sglang-ready), run as systemd runs it, against the
SGLang double on loopback: it passes only once the server serves, asks /health where /ready is missing or behind
the API key, and fails at once when the main process or a scheduler dies."""
import importlib.machinery
import importlib.util
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

import pytest

from ansible_collections.inferops.sglang.plugins.module_utils._server import listeners as _listeners
from ansible_collections.inferops.sglang.plugins.module_utils._host import procfs as _procfs
from tests.unit.conftest import ROOT, free_port, wait_for

GATE = str(ROOT / "roles" / "systemd_unit" / "files" / "inferops-sglang-ready")
DOUBLE = str(ROOT / "tests" / "sglang_double")


@pytest.fixture
def double(spawn, tmp_path):
    def start(*args, version="0.5.23", load="1", faults="", preexec_fn=None):
        port = free_port()
        env = dict(os.environ, PYTHONPATH=DOUBLE, SGLANG_DOUBLE_VERSION=version, SGLANG_DOUBLE_LOAD_SECONDS=load,
                   SGLANG_DOUBLE_WARMUP_SECONDS="0.3", SGLANG_DOUBLE_HEALTH_SECONDS="0.2", SGLANG_DOUBLE_FAULTS=faults)
        p = subprocess.Popen([sys.executable, "-m", "sglang.launch_server", "--model-path", "/models/m", "--port",
                              str(port)] + list(args), env=env, stdout=open(str(tmp_path / "log"), "ab"),
                             stderr=subprocess.STDOUT, start_new_session=True, preexec_fn=preexec_fn)
        spawn.procs.append(p)
        p.port = port
        return p
    return start


def gate(port, spawn, host="127.0.0.1", preexec_fn=None, **env):
    """The gate, started as ExecStartPost is: the unit's environment (MAINPID, the environment file's names), in the
    unit's cgroup (preexec_fn)."""
    p = subprocess.Popen([sys.executable, GATE, host, str(port)], env=dict(os.environ, **env), preexec_fn=preexec_fn,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True)
    spawn.procs.append(p)
    return p


def ready_events(server):
    return _listeners.local_url(server.port) is not None


@pytest.mark.parametrize("version", ["0.5.5", "0.5.9", "0.5.15", "0.5.23"])
def test_passes_once_the_server_serves_behind_the_key_without_it(double, spawn, version):
    """With --api-key, SGLang 0.5.5-0.5.15 answer /ready with 401: the gate asks /health (open without the key on
    every version) instead of polling 401 until TimeoutStartSec. It never needs the key, so it never sends it."""
    server = double("--api-key", "sk-gate", version=version)
    g = gate(server.port, spawn, MAINPID=str(server.pid), INFEROPS_API_KEY="sk-gate")
    out, err = g.communicate(timeout=60)
    assert g.returncode == 0, err
    assert ready_events(server)


def test_another_process_on_the_port_fails_the_gate_at_once_and_gets_no_key(impostor, cgroups, spawn):
    """Another user (nobody, another cgroup) holds the port while the unit's server loads: its /ready answers 200.
    The server cannot bind the port once loaded (a real one then lives on for minutes, ignoring SIGTERM): the gate
    fails at once naming the holder, instead of waiting out TimeoutStartSec, and asks it nothing (no key)."""
    port = free_port()
    holder = impostor.start(port)
    loading = subprocess.Popen(["sleep", "600"], preexec_fn=cgroups.enter("sglang-t.service"))
    spawn.procs.append(loading)
    t0 = time.monotonic()
    g = gate(port, spawn, preexec_fn=cgroups.enter("sglang-t.service"), MAINPID=str(loading.pid),
             INFEROPS_API_KEY="sk-gate-secret")
    out, err = g.communicate(timeout=30)
    assert g.returncode == 1 and time.monotonic() - t0 < 10
    assert "port %d is held by pid %d (/usr/bin/python3 -c " % (port, holder.pid) in err
    assert "a process outside this unit: the server cannot bind it" in err
    assert impostor.requests() == [], "nothing was asked of it, the key least of all"


def test_the_answer_counts_only_from_the_units_own_listener(double, impostor, cgroups, spawn):
    """The unit's server listens on 127.0.0.2, an impostor on 127.0.0.1, same port: asked at 127.0.0.1, the gate
    reaches the impostor, and a listener of the unit's on the port (another address) does not make that answer the
    server's: it fails. Asked at 127.0.0.2, it passes."""
    unit = cgroups.enter("sglang-t.service")
    server = double("--host", "127.0.0.2", preexec_fn=unit, load="0.3")
    wait_for(lambda: _listeners.listeners(server.port, _procfs.snapshot()), 15)
    holder = impostor.start(server.port, host="127.0.0.1")
    wrong = gate(server.port, spawn, preexec_fn=unit, MAINPID=str(server.pid))
    right = gate(server.port, spawn, host="127.0.0.2", preexec_fn=unit, MAINPID=str(server.pid))
    out, err = right.communicate(timeout=30)
    assert right.returncode == 0, err
    out, err = wrong.communicate(timeout=30)
    assert wrong.returncode == 1 and "port %d is held by pid %d" % (server.port, holder.pid) in err
    assert [r["path"] for r in impostor.requests()] == [], "nothing was asked of it: the connection was not the unit's"


def test_another_sglang_server_on_the_port_fails_the_gate(double, cgroups, spawn):
    """Another SGLang server holds the port (the real new server would log "fired up", talking to it, and exit 3
    after about 26 s): the gate fails at once; the other server serves on."""
    other = double(load="0.3")
    wait_for(lambda: _listeners.listeners(other.port, _procfs.snapshot()), 15)
    mine = subprocess.Popen(["sleep", "600"], preexec_fn=cgroups.enter("sglang-t.service"))
    spawn.procs.append(mine)
    g = gate(other.port, spawn, preexec_fn=cgroups.enter("sglang-t.service"), MAINPID=str(mine.pid))
    out, err = g.communicate(timeout=30)
    assert g.returncode == 1 and "port %d is held by pid %d (%s -m sglang.launch_server" % (
        other.port, other.pid, sys.executable) in err
    assert other.poll() is None


def test_waits_through_loading(double, spawn):
    server = double(load="2")
    t0 = time.monotonic()
    g = gate(server.port, spawn, MAINPID=str(server.pid))
    g.communicate(timeout=60)
    assert g.returncode == 0 and time.monotonic() - t0 >= 2.0, "not ready while the port is closed"


def test_fails_at_once_when_the_main_process_dies(double, spawn):
    server = double(load="2", faults="crash_during_load")
    g = gate(server.port, spawn, MAINPID=str(server.pid))
    out, err = g.communicate(timeout=30)
    assert g.returncode == 1 and "main process %d exited before it was ready" % server.pid in err


def test_fails_when_a_scheduler_is_killed(double, spawn):
    """SGLang before 0.5.15 waits for ever after a scheduler is SIGKILLed (OOM): the gate must not."""
    server = double("--tp", "2", load="30", version="0.5.9")

    def both():
        found = [p for p in _procfs.snapshot().values()
                 if p.cmdline.startswith("sglang::scheduler") and server.pid in _procfs.ancestors(p.pid)]
        return found if len(found) == 2 else None

    schedulers = wait_for(both, 20)  # tp 2: both retitled
    g = gate(server.port, spawn, MAINPID=str(server.pid))
    watched = [g.stdout.readline() for dummy in schedulers]  # the gate says which schedulers it watches
    assert sorted(watched) == sorted("watching %s (pid %d)\n" % (s.cmdline, s.pid) for s in schedulers)
    assert g.poll() is None
    os.kill(schedulers[0].pid, 9)
    out, err = g.communicate(timeout=10)
    assert g.returncode == 1 and "lost its scheduler %s (pid %d)" % (schedulers[0].cmdline, schedulers[0].pid) in err


def test_another_trees_scheduler_is_not_its_own(double, spawn):
    """A scheduler of another server in the same cgroup (here: the test's) dying is not this server's loss."""
    other = double("--tp", "2", load="30", version="0.5.9")
    theirs = wait_for(lambda: [p for p in _procfs.snapshot().values()
                               if p.cmdline.startswith("sglang::scheduler") and other.pid in _procfs.ancestors(p.pid)], 20)
    server = double(load="3")
    g = gate(server.port, spawn, MAINPID=str(server.pid))
    assert g.stdout.readline() == "watching sglang::scheduler (pid %d)\n" % [
        p.pid for p in _procfs.snapshot().values() if p.cmdline == "sglang::scheduler" and server.pid in _procfs.ancestors(p.pid)][0]
    os.kill(theirs[0].pid, 9)
    out, err = g.communicate(timeout=60)
    assert g.returncode == 0, err


def test_an_ipv6_only_server_is_asked_on_its_loopback(double, spawn):
    """`--host ::` is IPv6 only (as a real 0.5.15's uvicorn binds it): the gate the unit renders for it asks ::1 and
    passes; asked at 127.0.0.1 it would find the port closed until TimeoutStartSec."""
    server = double("--host", "::", version="0.5.15")
    right = gate(server.port, spawn, host="::1", MAINPID=str(server.pid))
    wrong = gate(server.port, spawn, host="127.0.0.1", MAINPID=str(server.pid))
    out, err = right.communicate(timeout=60)
    assert right.returncode == 0, err
    with pytest.raises(subprocess.TimeoutExpired):
        wrong.communicate(timeout=3)


def test_v1_models_200_during_the_warm_up_does_not_pass_the_gate(double, spawn):
    """/v1/models answers 200 while the model warms up (seen on a real 0.5.15); readiness is /health's alone."""
    server = double(version="0.5.15", faults="never_healthy", load="0.3")
    g = gate(server.port, spawn, MAINPID=str(server.pid))
    url = "http://127.0.0.1:%d" % server.port
    wait_for(lambda: _status(url + "/v1/models") == 200, 15)
    with pytest.raises(subprocess.TimeoutExpired):
        g.communicate(timeout=3)
    assert _status(url + "/v1/models") == 200 and _status(url + "/health") == 503


def _status(url):
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code
    except OSError:
        return 0


ASK = r"""
import importlib.machinery, importlib.util, json, sys
loader = importlib.machinery.SourceFileLoader("gate", sys.argv[1])
spec = importlib.util.spec_from_loader("gate", loader)
gate = importlib.util.module_from_spec(spec)
loader.exec_module(gate)
print(json.dumps(gate.ask("127.0.0.1", int(sys.argv[2]), "/health", {}, gate.cgroup(gate.os.getpid()))))
"""


def test_a_listener_of_the_units_own_cgroup_is_the_servers_though_the_snapshot_missed_it(double, cgroups, spawn):
    """The gate's look at the unit's processes is a snapshot, and accept() shows the connection's inode before the
    server holds its descriptor: the process found holding it then is the server when it is in the unit's cgroup
    (under load, the gate failed a healthy server as 'a process outside this unit'), and outside when it is not."""
    unit = cgroups.enter("sglang-t.service")
    server = double(preexec_fn=unit, load="0.3")
    wait_for(lambda: _listeners.listeners(server.port, _procfs.snapshot()), 15)
    mine = subprocess.run([sys.executable, "-c", ASK, GATE, str(server.port)], preexec_fn=cgroups.enter("sglang-t.service"),
                          stdout=subprocess.PIPE, universal_newlines=True, timeout=30, check=True).stdout
    assert json.loads(mine) in (200, 503), "asked: the listener is the unit's own"
    theirs = subprocess.run([sys.executable, "-c", ASK, GATE, str(server.port)],
                            preexec_fn=cgroups.enter("other.service"),
                            stdout=subprocess.PIPE, universal_newlines=True, timeout=30, check=True).stdout
    assert json.loads(theirs)[0] == server.pid, "from another cgroup, the server is a process outside the unit"


def load_gate():
    loader = importlib.machinery.SourceFileLoader("inferops_sglang_ready", GATE)
    module = importlib.util.module_from_spec(importlib.util.spec_from_loader(loader.name, loader))
    loader.exec_module(module)
    return module


# /proc/PID/cgroup of one process of sglang-t.service on a hybrid host, read twice: between the reads a container
# runtime mounted three cgroup v1 hierarchies for another container (seen under a loaded CI: the gate then failed a
# healthy server as "a process outside this unit"), and of a process of another unit
HYBRID = ("9:name=systemd:/libpod-1/system.slice/sglang-t.service\n8:pids:/libpod-1\n1:cpu:/libpod-1\n"
          "0::/libpod-1/system.slice/sglang-t.service\n")
HYBRID_LATER = "20:perf_event:/\n19:hugetlb:/\n18:net_cls,net_prio:/\n" + HYBRID
OTHER = HYBRID.replace("sglang-t.service", "other.service")
CGROUP_TEXTS = [HYBRID, HYBRID_LATER, OTHER, "0::/system.slice/sglang-t.service\n",
                "12:memory:/x\n1:name=systemd:/system.slice/sglang-t.service\n", "3:cpu:/\n", ""]


def test_a_process_is_of_the_unit_by_its_tracked_cgroup_not_by_every_hierarchy_listed(monkeypatch):
    """Two reads of the same process's cgroup are the same unit though the hierarchies listed changed between them;
    another unit's is not."""
    gate = load_gate()
    texts = {1: HYBRID.encode(), 2: HYBRID_LATER.encode(), 3: OTHER.encode()}
    monkeypatch.setattr(gate, "read", lambda path: texts[int(path.split("/")[2])])
    assert gate.cgroup(1) == gate.cgroup(2) == "/libpod-1/system.slice/sglang-t.service"
    assert gate.cgroup(3) != gate.cgroup(1)


@pytest.mark.parametrize("text", CGROUP_TEXTS)
def test_the_gate_reads_a_cgroup_as_the_modules_do(text):
    """The gate runs on the server's interpreter, outside the collection: its rule is written again there, and the two
    must agree (module_utils/_host/procfs.cgroup_path)."""
    assert load_gate().tracked(text.encode()) == _procfs.cgroup_path(text)


# --- the liveness checker (--live) -----------------------------------------------------------------------------------

class Watchdog:
    """systemd's end of $NOTIFY_SOCKET: a datagram socket whose messages are kept with the time each came."""

    def __init__(self, path):
        self.path = str(path)
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(self.path)
        self.sock.settimeout(0.1)
        self.got = []

    def read(self, seconds):
        """Every message of the next seconds, kept; returns those."""
        end, new = time.monotonic() + seconds, []
        while time.monotonic() < end:
            try:
                new.append((time.monotonic(), self.sock.recv(4096).decode()))
            except socket.timeout:
                continue
        self.got.extend(new)
        return new

    def pings(self, seconds):
        return [t for t, m in self.read(seconds) if m == "WATCHDOG=1"]


@pytest.fixture
def watchdog(tmp_path):
    w = Watchdog(tmp_path / "notify")
    yield w
    w.sock.close()


def live(port, spawn, journal, preexec_fn, interval="0.5", **env):
    """The checker, started as its ExecStartPost is (isolated, in the unit's cgroup): returns once it forked, its
    ExecStartPost ended; what the left child says goes to journal."""
    p = subprocess.Popen([sys.executable, "-I", GATE, "--live", "127.0.0.1", str(port), interval],
                         env=dict(os.environ, **env), preexec_fn=preexec_fn, stdout=open(str(journal), "ab"),
                         stderr=subprocess.STDOUT)
    assert p.wait(timeout=15) == 0, journal.read_text()
    return p


HEALTH_TIMEOUT = "2"  # SGLANG_HEALTH_CHECK_TIMEOUT of the server and, through the unit's environment file, the checker


@pytest.fixture
def served(double, cgroups, spawn, tmp_path, watchdog):
    """A server of the double in the unit's cgroup, ready, and its checker feeding watchdog; (server, scheduler pid,
    journal)."""
    def start(prefill="0"):
        unit = cgroups.enter("sglang-t.service")
        knobs = {"SGLANG_HEALTH_CHECK_TIMEOUT": HEALTH_TIMEOUT, "SGLANG_DOUBLE_PREFILL_SECONDS_PER_TOKEN": prefill}
        os.environ.update(knobs)
        try:
            server = double(preexec_fn=unit, load="0.3")
        finally:
            for k in knobs:
                del os.environ[k]
        g = gate(server.port, spawn, preexec_fn=unit, MAINPID=str(server.pid))
        assert g.wait(timeout=60) == 0
        scheduler = [p.pid for p in _procfs.snapshot().values()
                     if p.cmdline.startswith("sglang::scheduler") and server.pid in _procfs.ancestors(p.pid)][0]
        journal = tmp_path / "journal"
        live(server.port, spawn, journal, unit, MAINPID=str(server.pid), NOTIFY_SOCKET=watchdog.path,
             SGLANG_HEALTH_CHECK_TIMEOUT=HEALTH_TIMEOUT)
        return server, scheduler, journal
    return start


def test_live_feeds_the_watchdog_while_the_server_answers_and_stops_when_it_ends(served, watchdog):
    server, scheduler, journal = served()
    pings = watchdog.pings(4)
    assert len(pings) >= 4, (watchdog.got, journal.read_text())
    assert "liveness: watching /health_generate on port %d every 0.5 s and 1 scheduler(s): sglang::scheduler (pid %d)" \
        % (server.port, scheduler) in journal.read_text()
    checker = [p.pid for p in _procfs.snapshot().values() if "--live" in p.cmdline]
    assert len(checker) == 1, "one checker left in the unit"
    server.kill()
    server.wait()
    wait_for(lambda: not [p for p in _procfs.snapshot().values() if "--live" in p.cmdline], 30)


def test_live_a_stopped_scheduler_gets_no_watchdog_then_feeds_it_again_once_it_runs(served, watchdog):
    """SIGSTOP of the scheduler (a hang with every process alive): /health_generate gets no output within its
    timeout, and the stopped scheduler is no progress: no WATCHDOG=1 (systemd then ends the server after WatchdogSec).
    Once it runs again the answers feed the watchdog again."""
    server, scheduler, journal = served()
    assert watchdog.pings(2)
    os.kill(scheduler, signal.SIGSTOP)
    try:
        watchdog.read(float(HEALTH_TIMEOUT) + 1.5)  # a probe sent before the stop may still be answered
        assert watchdog.pings(6) == [], journal.read_text()
        assert "no answer from /health_generate (HTTP 503) and no progress: its scheduler sglang::scheduler " \
               "(pid %d) is stopped" % scheduler in journal.read_text()
    finally:
        os.kill(scheduler, signal.SIGCONT)
    assert watchdog.pings(float(HEALTH_TIMEOUT) + 3)
    assert "liveness: answered again" in journal.read_text()


def test_live_a_long_prefill_that_keeps_health_from_answering_still_feeds_the_watchdog(served, watchdog):
    """A 12-s prefill (a long prompt): no output of the scheduler meanwhile, so /health_generate answers 503 after its
    timeout, but the scheduler is busy: the watchdog is fed all along (never a gap near WatchdogSec)."""
    server, scheduler, journal = served(prefill="0.01")
    prompt = " ".join(["word"] * 1200)
    body = json.dumps({"text": prompt, "sampling_params": {"max_new_tokens": 2}}).encode()
    req = urllib.request.Request("http://127.0.0.1:%d/generate" % server.port, data=body,
                                 headers={"Content-Type": "application/json"})
    result = {}

    def generate():
        with urllib.request.urlopen(req, timeout=60) as r:
            result["status"] = r.status
        result["seconds"] = time.monotonic() - t0

    t = threading.Thread(target=generate)
    t0 = time.monotonic()
    t.start()
    pings = watchdog.pings(11)
    t.join(30)
    assert result.get("status") == 200 and result["seconds"] >= 12, result
    text = journal.read_text()
    assert "no answer from /health_generate (HTTP 503), but every scheduler is busy: not restarted" in text, text
    gaps = [b - a for a, b in zip([t0] + pings, pings + [t0 + 11])]
    assert max(gaps) < 6, (gaps, text)


def test_with_a_watchdog_the_gate_feeds_it_while_the_server_loads(double, spawn, watchdog):
    """systemd arms the watchdog as ExecStartPost begins (service_enter_start_post), during the load: the gate sends
    WATCHDOG=1 every second while the main process lives, so a load longer than WatchdogSec is never cut short."""
    server = double(load="5")
    g = gate(server.port, spawn, MAINPID=str(server.pid), NOTIFY_SOCKET=watchdog.path)
    t0 = time.monotonic()
    pings = watchdog.pings(4)
    assert g.poll() is None, "still loading"
    gaps = [b - a for a, b in zip([t0] + pings, pings)]
    assert len(pings) >= 3 and max(gaps) < 2.0, gaps
    assert g.wait(timeout=60) == 0


def test_live_without_a_notify_socket_fails_its_start(double, cgroups, spawn, tmp_path):
    unit = cgroups.enter("sglang-t.service")
    server = double(preexec_fn=unit, load="0.3")
    env = {k: v for k, v in os.environ.items() if k != "NOTIFY_SOCKET"}
    p = subprocess.run([sys.executable, "-I", GATE, "--live", "127.0.0.1", str(server.port), "1"], env=dict(
        env, MAINPID=str(server.pid)), preexec_fn=unit, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        universal_newlines=True, timeout=15, check=False)
    assert p.returncode == 1 and "no NOTIFY_SOCKET: the unit's watchdog needs NotifyAccess=all" in p.stderr


# --- the weight cache's gate (--weights, --clean) -------------------------------------------------------------------

def test_the_weight_caches_gate_counts_only_ready_files_of_live_processes_and_clean_removes_the_rest(
        tmp_path, spawn, monkeypatch):
    """A killed daemon leaves its socket and ready file (seen on a real 0.5.17): --clean removes them before the
    daemon starts, and --weights counts a rank only when its ready file names a live process of the unit."""
    gate = load_gate()
    dead = subprocess.Popen(["true"])
    dead.wait()
    live = subprocess.Popen(["sleep", "60"])
    spawn.procs.append(live)
    for rank, pid in (("rank0", dead.pid), ("rank1", live.pid)):
        (tmp_path / ("sglang_weight_cache_%s.ready" % rank)).write_text("pid=%d\nmodel=/models/m\n" % pid)
        (tmp_path / ("sglang_weight_cache_%s.sock" % rank)).write_text("")
    (tmp_path / "sglang_weight_cache_rank2.sock").write_text("")  # a socket without its ready file
    (tmp_path / "other.ready").write_text("pid=1\n")
    monkeypatch.delenv("MAINPID", raising=False)
    assert gate.weights(0, clean=True, folder=str(tmp_path)) == 0
    assert sorted(os.listdir(str(tmp_path))) == ["other.ready", "sglang_weight_cache_rank1.ready",
                                                 "sglang_weight_cache_rank1.sock"]
    assert gate.weights(1, folder=str(tmp_path)) == 0
    monkeypatch.setenv("MAINPID", str(dead.pid))  # two ranks awaited, and the daemon's main process is gone
    with pytest.raises(SystemExit) as e:
        gate.weights(2, folder=str(tmp_path))
    assert "the weight cache daemon's main process %d exited before it was ready" % dead.pid in str(e.value)
