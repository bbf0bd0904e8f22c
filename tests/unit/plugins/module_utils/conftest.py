"""What the module_utils tests share: real processes and servers to look at, files, and a fake AnsibleModule to drive
the managers with."""
import json
import os
import shlex
import shutil
import subprocess
import sys

import pytest

from ansible_collections.inferops.sglang.plugins.module_utils import _discover, _procfs
from ansible_collections.inferops.sglang.plugins.module_utils._command import run_command
from tests.unit.conftest import ROOT, free_port, wait_for

DOUBLE = str(ROOT / "tests" / "sglang_double")
MIB = 1 << 20


@pytest.fixture
def run(spawn, tmp_path):
    """run(PROGRAM, *args) -> (Popen, info dict) once the program wrote its ready file."""
    count = [0]

    def start(program, *args, **kw):
        count[0] += 1
        ready = tmp_path / ("ready-%d.json" % count[0])
        p = spawn.python(program, str(ready), *args, **kw)
        wait_for(lambda: ready.exists() and ready.stat().st_size > 0, 10)
        return p, json.loads(ready.read_text())

    return start


def globs(devices):
    return [str(devices / "nvidia*"), str(devices / "nvidia-caps" / "*")]


class Systemctl:
    """Runs every command for real except systemctl (systemd is not PID 1 on this machine; the molecule
    scenarios run the switch against a real one). Records what the switch asked of it."""

    def __init__(self):
        self.calls = []

    def __call__(self, argv):
        if "systemctl" in argv:
            self.calls.append(argv[argv.index("systemctl"):])
            return 0, "0\n" if "--property=MainPID" in argv else "", ""
        return run_command(argv)


@pytest.fixture
def devices(tmp_path):
    """Regular files standing in for two GPUs' device nodes and the shared nodes."""
    d = tmp_path / "dev"
    (d / "nvidia-caps").mkdir(parents=True)
    for name in ("nvidia0", "nvidia1", "nvidiactl", "nvidia-uvm", "nvidia-caps/nvidia-cap1", "nvidia-caps/nvidia-cap2"):
        (d / name).touch()
    return d


@pytest.fixture
def decoy(tmp_path, devices):
    """A real executable named nvidia-persistenced holding every device file open (fds kept across exec)."""
    exe = tmp_path / "bin" / "nvidia-persistenced"
    exe.parent.mkdir()
    shutil.copy("/bin/sleep", exe)
    files = sorted(str(p) for p in devices.rglob("*") if p.is_file())
    redirs = " ".join("%d<%s" % (3 + i, f) for i, f in enumerate(files))
    p = subprocess.Popen(["bash", "-c", "exec %s %s 600" % (redirs, exe)], stdin=subprocess.DEVNULL)
    wait_for(lambda: os.path.basename(os.readlink("/proc/%d/exe" % p.pid)) == "nvidia-persistenced")
    yield p
    p.kill()
    p.wait()


@pytest.fixture
def shell(spawn, tmp_path):
    """Runs a bash script in a session of its own, as an operator's terminal would; the double is on PYTHONPATH."""
    def start(script):
        env = dict(os.environ, PYTHONPATH=str(ROOT / "tests" / "sglang_double"), SGLANG_DOUBLE_LOAD_SECONDS="0.3", SGLANG_DOUBLE_WARMUP_SECONDS="0.1",
                   SGLANG_DOUBLE_DEVICES=str(tmp_path / "nvidia*"), INFEROPS_TEST_MARKER=spawn.marker)
        (tmp_path / "nvidia0").touch()
        p = subprocess.Popen(["bash", "-c", script], env=env, start_new_session=True, stdin=subprocess.DEVNULL,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=str(tmp_path))
        spawn.procs.append(p)
        return p
    return start


def server_cmd(port, py=sys.executable):
    return "%s -m sglang.launch_server --model-path /models/m --tp 2 --port %d" % (shlex.quote(py), port)


def wait_listening(port):
    return wait_for(lambda: _discover.listeners(port, _procfs.snapshot()), 15)


@pytest.fixture
def server(spawn, tmp_path):
    def start(*args, **knobs):
        port = free_port()
        env = dict(os.environ, PYTHONPATH=DOUBLE, SGLANG_DOUBLE_STATE_FILE=str(tmp_path / "state.jsonl"),
                   SGLANG_DOUBLE_LOAD_SECONDS="1", SGLANG_DOUBLE_WARMUP_SECONDS="0.5", SGLANG_DOUBLE_HEALTH_SECONDS="1")
        env.update({"SGLANG_DOUBLE_" + k.upper(): str(v) for k, v in knobs.items()})
        p = subprocess.Popen([sys.executable, "-m", "sglang.launch_server", "--model-path", "/models/m", "--tp", "1",
                              "--port", str(port), "--served-model-name", spawn.marker, *args],
                             env=env, stdout=open(tmp_path / "log", "wb"), stderr=subprocess.STDOUT)
        spawn.procs.append(p)
        p.url = "http://127.0.0.1:%d" % port
        p.events = lambda: dict((e["event"], e["time"]) for e in map(json.loads, open(tmp_path / "state.jsonl")))
        return p
    return start


def installed_double(tmp_path):
    """The double where a venv has it: the package (its parser at sglang.srt.server_args, as in the real wheels) with
    its metadata."""
    site = tmp_path / "site"
    shutil.copytree(str(ROOT / "tests" / "sglang_double" / "sglang"), str(site / "sglang"))
    meta = site / "sglang-0.5.23.dist-info"
    meta.mkdir()
    (meta / "METADATA").write_text("Metadata-Version: 2.1\nName: sglang\nVersion: 0.5.23\n")
    return str(site)


def write(path, size):
    with open(str(path), "wb") as f:
        for dummy in range(size // MIB):
            f.write(os.urandom(MIB))
        f.write(os.urandom(size % MIB))
        f.flush()
        os.fsync(f.fileno())  # dirty pages cannot be dropped
    return str(path)


def evict(path):
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


# nvidia-smi for one real holder: listed with its memory while it lives, then unlisted, memory.used lagging
# for LAG more readings.
LAGGING_SMI = r"""#!/bin/sh
d=%s; pid=$(cat $d/pid); lag=%d
alive() { [ -d /proc/$pid ] && ! grep -q '^State:.*Z' /proc/$pid/status 2>/dev/null; }
case "$1" in
  --query-gpu=index,uuid,memory.used)
    if alive; then echo "0, GPU-5d1c, 24640"; exit; fi
    n=$(cat $d/gone 2>/dev/null || echo 0); echo $((n + 1)) > $d/gone
    if [ $n -lt $lag ]; then echo "0, GPU-5d1c, 24640"; else echo "0, GPU-5d1c, 20015"; fi ;;
  --query-compute-apps=pid,process_name,used_memory,gpu_uuid)
    echo "4202, sglang::scheduler_TP0, 20000, GPU-5d1c"
    if alive; then echo "$pid, python3, 4614, GPU-5d1c"; fi ;;
  *) echo "bad args: $*" >&2; exit 6 ;;
esac
"""


@pytest.fixture
def lagging_smi(tmp_path, monkeypatch):
    """lagging_smi(pid, lag) puts LAGGING_SMI for pid first on PATH; returns its folder (`gone` there counts the
    readings since pid ended)."""
    def install(pid, lag):
        d = tmp_path / "lagging"
        d.mkdir()
        (d / "pid").write_text(str(pid))
        exe = tmp_path / "lagging-bin" / "nvidia-smi"
        exe.parent.mkdir()
        exe.write_text(LAGGING_SMI % (d, lag))
        exe.chmod(0o755)
        monkeypatch.setenv("PATH", "%s:%s" % (exe.parent, os.environ["PATH"]))
        return d
    return install


class Exited(Exception):
    """exit_json's result."""


class Failed(Exited):
    """fail_json's result (failed=True in it, as AnsibleModule adds)."""


class FakeModule:
    """What the managers use of AnsibleModule: params (a subclass's defaults under the given ones), check and diff
    mode, exit_json and fail_json raising with the result, commands run for real, warnings and logs kept."""

    defaults = {}
    check_mode = False
    _diff = False

    def __init__(self, check_mode=None, diff=None, **params):
        if check_mode is not None:
            self.check_mode = check_mode
        if diff is not None:
            self._diff = diff
        self.params = dict(self.defaults, **params)
        self.warnings, self.logged = [], []

    def exit_json(self, **result):
        raise Exited(result)

    def fail_json(self, **result):
        raise Failed(dict(result, failed=True))

    def run_command(self, argv):
        return run_command(argv)

    def warn(self, msg):
        self.warnings.append(msg)

    def log(self, msg):
        self.logged.append(msg)
