"""The real wheels, and the double run as a real process tree on loopback with short timings."""
import os
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from tests.conformance.realwheel import RealWheel
from tests.conformance.versions import ROOT, VERSIONS, wheel_path
from tests import helpers
from tests.helpers import free_port

DOUBLE = ROOT / "tests" / "sglang_double"
FAST = {"SGLANG_DOUBLE_LOAD_SECONDS": "0", "SGLANG_DOUBLE_WARMUP_SECONDS": "0",
        "SGLANG_DOUBLE_HEALTH_SECONDS": "0.01", "SGLANG_DOUBLE_WATCHDOG_SECONDS": "0.2"}


@pytest.fixture(scope="session", params=VERSIONS)
def version(request):
    return request.param


@pytest.fixture(scope="session")
def wheels():
    return {v: RealWheel(wheel_path(v)) for v in VERSIONS}


@pytest.fixture(scope="session")
def wheel(wheels, version):
    w = wheels[version]
    assert w.version == version, "%s holds sglang %s" % (w.path, w.version)
    return w


def double_env(version, **extra):
    env = dict(os.environ, PYTHONPATH=str(DOUBLE), SGLANG_DOUBLE_VERSION=version, **FAST)
    env.update(extra)
    return env


def get(port, path, key=None):
    """The HTTP status of GET path (0: connection refused)."""
    req = urllib.request.Request("http://127.0.0.1:%d%s" % (port, path),
                                 headers={"Authorization": "Bearer " + key} if key else {})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code
    except urllib.error.URLError as e:
        if isinstance(e.reason, ConnectionRefusedError):
            return 0
        raise


def wait_for(cond, timeout=20.0):
    return helpers.wait_for(cond, timeout, 0.02)


def stat(pid):
    text = Path("/proc/%d/stat" % pid).read_text()
    return text[text.rindex(")") + 2:].split()


def tree(pid):
    """{pid: (ppid, cmdline)} of every process below pid."""
    kids = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                kids.setdefault(int(stat(int(d))[1]), []).append(int(d))
            except OSError:
                continue
    out, todo = {}, [pid]
    while todo:
        parent = todo.pop()
        for c in kids.get(parent, []):
            try:
                out[c] = (parent, Path("/proc/%d/cmdline" % c).read_bytes().replace(b"\0", b" ").decode().strip())
            except OSError:
                continue
            todo.append(c)
    return out


class Running:
    """`python -m sglang.launch_server --model-path M <args>` of the double as `version`."""

    def __init__(self, tmp, version, args):
        self.port = free_port()
        model = tmp / "model"
        model.mkdir(exist_ok=True)
        argv = [sys.executable, "-m", "sglang.launch_server", "--model-path", str(model), "--host", "127.0.0.1",
                "--port", str(self.port), *args]
        self.log = tmp / ("double-%d.log" % self.port)
        with open(self.log, "wb") as log:
            env = double_env(version, SGLANG_DOUBLE_STATE_FILE=str(tmp / ("state-%d.jsonl" % self.port)))
            self.proc = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.kill()  # the children follow (PR_SET_PDEATHSIG)
            self.proc.wait()
        helpers.unlink_recorded_shm(self.log.parent)  # a session's doubles too (no per-test tmp_path)


@pytest.fixture(autouse=True)
def _no_shm_left(tmp_path):
    """The shared memory this test's doubles created is gone after it (tests.helpers.unlink_recorded_shm)."""
    yield
    helpers.unlink_recorded_shm(tmp_path)


@pytest.fixture
def run_double(tmp_path):
    started = []

    def start(version, *args):
        d = Running(tmp_path, version, args)
        started.append(d)
        return d

    yield start
    for d in started:
        d.stop()
