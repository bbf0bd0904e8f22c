import json
import os
import shutil
import subprocess

import pytest

from tests.unit.conftest import ROOT, wait_for  # noqa: F401  (wait_for re-exported for the tests)


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


def run_command(argv):
    """What AnsibleModule.run_command gives the module_utils: (rc, stdout, stderr)."""
    p = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True, check=False)
    return p.returncode, p.stdout, p.stderr


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
    from tests.unit.conftest import wait_for as w
    w(lambda: os.path.basename(os.readlink("/proc/%d/exe" % p.pid)) == "nvidia-persistenced")
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
