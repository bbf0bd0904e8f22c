"""The unit's readiness gate (roles/systemd_unit/files/inferops-sglang-ready), run as systemd runs it, against the
SGLang double on loopback: it passes only once the server serves, asks /health where /ready is missing or behind
the API key, and fails at once when the main process or a scheduler dies."""
import os
import subprocess
import sys
import time

import pytest

from ansible_collections.inferops.sglang.plugins.module_utils import _discover, _procfs
from tests.unit.conftest import ROOT, free_port, wait_for

GATE = str(ROOT / "roles" / "systemd_unit" / "files" / "inferops-sglang-ready")
DOUBLE = str(ROOT / "tests" / "sglang_double")


@pytest.fixture
def double(spawn, tmp_path):
    def start(*args, version="0.5.23", load="1", faults=""):
        port = free_port()
        env = dict(os.environ, PYTHONPATH=DOUBLE, SGLANG_DOUBLE_VERSION=version, SGLANG_DOUBLE_LOAD_SECONDS=load,
                   SGLANG_DOUBLE_WARMUP_SECONDS="0.3", SGLANG_DOUBLE_HEALTH_SECONDS="0.2", SGLANG_DOUBLE_FAULTS=faults)
        p = subprocess.Popen([sys.executable, "-m", "sglang.launch_server", "--model-path", "/models/m", "--port",
                              str(port)] + list(args), env=env, stdout=open(str(tmp_path / "log"), "ab"),
                             stderr=subprocess.STDOUT, start_new_session=True)
        spawn.procs.append(p)
        p.port = port
        return p
    return start


def gate(port, spawn, **env):
    """The gate, started as ExecStartPost is: the unit's environment (MAINPID, the environment file's names)."""
    p = subprocess.Popen([sys.executable, GATE, "127.0.0.1", str(port)], env=dict(os.environ, **env),
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True)
    spawn.procs.append(p)
    return p


def ready_events(server):
    return _discover.local_url(server.port) is not None


@pytest.mark.parametrize("version", ["0.5.5", "0.5.9", "0.5.15", "0.5.23"])
def test_passes_once_the_server_serves_with_or_without_the_key(double, spawn, version):
    """With --api-key, SGLang 0.5.5-0.5.15 answer /ready with 401: the gate asks /health (always open) instead
    of polling 401 until TimeoutStartSec; with the key in its environment it is let in everywhere."""
    server = double("--api-key", "sk-gate", version=version)
    main = dict(MAINPID=str(server.pid))
    without, with_key = gate(server.port, spawn, **main), gate(server.port, spawn, INFEROPS_API_KEY="sk-gate", **main)
    for g in (without, with_key):
        out, err = g.communicate(timeout=60)
        assert g.returncode == 0, err
    assert ready_events(server)


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
