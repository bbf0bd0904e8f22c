"""Runs the SGLang double as a real process tree on the host, with real HTTP on loopback."""
import json
import os
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from tests import helpers
from tests.helpers import free_port

DOUBLE = Path(__file__).resolve().parents[1]


def wait_for(cond, timeout=10.0, interval=0.02):
    return helpers.wait_for(cond, timeout, interval)


def http(port, path, method="GET", body=None, headers=None, timeout=10):
    """(status, body bytes); status 0 when the connection is refused."""
    req = urllib.request.Request("http://127.0.0.1:%d%s" % (port, path), data=body, method=method,
                                 headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()
    except (ConnectionRefusedError, urllib.error.URLError) as e:
        if isinstance(getattr(e, "reason", e), ConnectionRefusedError):
            return 0, b""
        raise


def children_of(pid):
    out = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                stat = Path("/proc/%s/stat" % d).read_text()
            except OSError:
                continue
            fields = stat[stat.rindex(")") + 2:].split()
            if int(fields[1]) == pid:
                out.append(int(d))
    return out


def cmdline(pid):
    return Path("/proc/%d/cmdline" % pid).read_bytes().replace(b"\0", b" ").decode().strip()


def alive(pid):
    try:
        stat = Path("/proc/%d/stat" % pid).read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2] != "Z"


def console_script(root, name, module):
    """The script pip writes for a [project.scripts] entry `name = module:main` (the test bed's venv has it)."""
    path = root / "bin" / name
    if not path.exists():
        path.parent.mkdir(exist_ok=True)
        path.write_text("#!%s\nimport re\nimport sys\nfrom %s import main\nif __name__ == '__main__':\n"
                        "    sys.argv[0] = re.sub(r'(-script\\.pyw|\\.exe)?$', '', sys.argv[0])\n"
                        "    sys.exit(main())\n" % (sys.executable, module))
        path.chmod(0o755)
    return path


def model_dir(root):
    """A local model directory: a tokenizer and a small weights file (what bench_serving and loading read)."""
    model = root / "models" / "tiny"
    if not model.is_dir():
        model.mkdir(parents=True)
        (model / "tokenizer.json").write_text("{}")
        (model / "model.safetensors").write_bytes(b"\0" * 4096)
    return model


class Double:
    """The double on loopback. launcher: "module" (python -m sglang.launch_server) or "script" (sglang serve)."""

    def __init__(self, tmp_path, args=(), tp=2, launcher="module", model=None, port=None, **knobs):
        tmp_path.mkdir(parents=True, exist_ok=True)
        self.port = port or free_port()
        self.model = str(model or model_dir(tmp_path))
        self.log = tmp_path / "sglang.log"
        self.dev = tmp_path / "dev"  # regular files standing in for the device nodes
        self.dev.mkdir(exist_ok=True)
        for name in ("nvidia0", "nvidia1", "nvidiactl", "nvidia-uvm"):
            (self.dev / name).touch()
        knobs.setdefault("devices", str(self.dev / "nvidia*"))
        extra_env = knobs.pop("env", None) or {}  # other variables of the server's environment
        env = dict(os.environ, PYTHONPATH=str(DOUBLE), SGLANG_DOUBLE_LOAD_SECONDS="0.5",
                   SGLANG_DOUBLE_WARMUP_SECONDS="0.3", SGLANG_DOUBLE_HEALTH_SECONDS="0.2",
                   SGLANG_DOUBLE_WATCHDOG_SECONDS="0.5", SGLANG_DOUBLE_STATE_FILE=str(tmp_path / "state.jsonl"))
        env.update({"SGLANG_DOUBLE_" + k.upper(): str(v) for k, v in knobs.items()})
        env.update(extra_env)
        head = [sys.executable, "-m", "sglang.launch_server"] if launcher == "module" else [
            sys.executable, str(console_script(tmp_path, "sglang", "sglang.cli.main")), "serve"]
        self.argv = [*head, "--model-path", self.model, *(["--tp", str(tp)] if tp else []), "--port", str(self.port), *args]
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen(self.argv, env=env, stdout=log, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL)
        self.pid = self.proc.pid

    def get(self, path, **kw):
        return http(self.port, path, **kw)

    def wait_ready(self, timeout=15):
        wait_for(lambda: self.get("/health")[0] == 200, timeout)

    def logtext(self):
        return self.log.read_text()

    def events(self):
        path = self.log.parent / "state.jsonl"
        return [json.loads(line)["event"] for line in path.read_text().splitlines()] if path.exists() else []

    def titled(self):
        """{title: pid} of the titled processes below the main one (the DP controller's schedulers too)."""
        found, todo = {}, [self.pid]
        while todo:
            for p in children_of(todo.pop()):
                todo.append(p)
                try:
                    title = cmdline(p)
                except OSError:
                    continue
                if title.startswith("sglang::"):
                    found[title] = p
        return found


@pytest.fixture(autouse=True)
def _no_shm_left(tmp_path):
    """The shared memory this test's doubles created is gone after it (tests.helpers.unlink_recorded_shm)."""
    yield
    helpers.unlink_recorded_shm(tmp_path)


@pytest.fixture
def double(tmp_path):
    made = []

    def start(*args, tmp=None, **kw):
        d = Double(tmp or tmp_path, *args, **kw)
        made.append(d)
        return d

    yield start
    for d in made:
        if d.proc.poll() is None:
            d.proc.kill()
            d.proc.wait()
    # what a fault left behind: this test's orphans, known by the device files they hold
    for pid in holders(str(tmp_path)):
        os.kill(pid, signal.SIGKILL)


def open_files(pid):
    """What the process's open file descriptors point to. One closed between the folder's listing and its readlink is
    not open any more, and is left out; a process that is gone raises (FileNotFoundError of its fd folder)."""
    base = "/proc/%d/fd" % pid
    out = []
    for fd in os.listdir(base):
        try:
            out.append(os.readlink("%s/%s" % (base, fd)))
        except FileNotFoundError:
            continue
    return out


def holders(prefix):
    """Pids with an open file under `prefix`."""
    found = []
    for pid in [int(x) for x in os.listdir("/proc") if x.isdigit()]:
        try:
            if any(target.startswith(prefix) for target in open_files(pid)):
                found.append(pid)
        except OSError:
            continue
    return found
