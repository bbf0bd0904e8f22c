"""What the module_utils tests share: real processes and servers to look at, files, and a fake AnsibleModule to drive
the managers with."""
import json
import mmap
import os
import pathlib
import pickle
import pwd
import shlex
import shutil
import subprocess
import sys
import tempfile

import pytest

from tests import helpers

from ansible_collections.inferops.sglang.plugins.module_utils._server import listeners as _listeners
from ansible_collections.inferops.sglang.plugins.module_utils._host import pagecache as _pagecache
from ansible_collections.inferops.sglang.plugins.module_utils._host import procfs as _procfs
from ansible_collections.inferops.sglang.plugins.module_utils._host.command import run_command
from tests.unit.conftest import ROOT, free_port, wait_for

DOUBLE = str(ROOT / "tests" / "sglang_double")
MIB = 1 << 20
NOBODY = pwd.getpwnam("nobody")


@pytest.fixture(autouse=True)
def _no_shm_left(tmp_path):
    """The shared memory this test's doubles created is gone after it (tests.helpers.unlink_recorded_shm)."""
    yield
    helpers.unlink_recorded_shm(tmp_path)


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


NOT_FOUND = {"LoadState": "not-found", "ActiveState": "inactive", "SubState": "dead"}  # as systemctl shows a unit it lacks


class Systemd:
    """systemctl as a host's systemd answers it, every other command run for real (systemd is not PID 1 here): each
    unit's properties (`show`, in blocks, in order), and what was asked of it (enable, disable, stop, start,
    daemon-reload...) recorded in calls and applied to them."""

    def __init__(self, **units):
        self.units = dict((name, dict(dict(LoadState="loaded", UnitFileState="disabled", ActiveState="inactive",
                                           MainPID="0"), **props)) for name, props in units.items())
        self.calls = []

    def __call__(self, argv):
        if "systemctl" not in argv:
            return run_command(argv)
        args = argv[argv.index("systemctl") + 1:]
        if args[0] == "--version":
            return 0, "systemd 252 (252.36-1~deb12u1)\n", ""
        if args[0] == "show":
            props = args[1].split("=", 1)[1].split(",")
            blocks = ["\n".join("%s=%s" % (p, self.units.get(u, NOT_FOUND).get(
                p, u if p == "Id" else "")) for p in props) for u in args[2:]]
            return 0, "\n\n".join(blocks) + "\n", ""
        self.calls.append(args)
        verb, unit = args[0], args[-1]
        if verb in ("enable", "disable"):
            self.units.setdefault(unit, {})["UnitFileState"] = verb + "d"
        elif verb == "stop":
            self.units.setdefault(unit, {}).update(ActiveState="inactive", MainPID="0")
        return 0, "", ""


def in_mount_namespace(fn, tmpfs, options):
    """fn() in a child process with a private mount namespace where tmpfs (a folder) is a tmpfs mounted with options
    (the state folder full or read-only, as on a host; nothing of it outlives the child): what fn returns."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its answer through the pipe, whatever happens
        try:
            os.close(read)
            os.unshare(os.CLONE_NEWNS)
            subprocess.run(["mount", "--make-rprivate", "/"], check=True)
            subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", tmpfs], check=True)
            answer = ("ok", fn())
        except BaseException as e:  # pylint: disable=broad-except
            answer = ("error", repr(e))
        with os.fdopen(write, "wb") as f:
            pickle.dump(answer, f)
        os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as f:
        kind, value = pickle.load(f)
    os.waitpid(pid, 0)
    assert kind == "ok", value
    return value


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


def nobody_kin(tmp):
    """A shell line that leaves two orphans of `nobody` in the caller's session: one titled sglang::scheduler, one
    running an executable of the server's interpreter's name (python3.N) with multiprocessing.spawn in its argv."""
    folder = tempfile.mkdtemp(prefix="inferops-nobody-")
    os.chmod(folder, 0o755)
    tmp.append(folder)
    fake = os.path.join(folder, os.path.basename(os.path.realpath(sys.executable)))
    shutil.copy("/bin/bash", fake)
    run_as = "setpriv --reuid=65534 --regid=65534 --clear-groups"
    return ("( %s bash -c 'exec -a sglang::scheduler_TP0 sleep 600' & ) ; "
            "( %s %s -c 'sleep 600; :' multiprocessing.spawn & )" % (run_as, run_as, shlex.quote(fake)))


def nobody_kin_running():
    """nobody_kin's two processes, once both run their own programs (each appears on its own), else None."""
    found = [p for p in _procfs.snapshot().values() if p.uid == 65534 and (
        p.cmdline.startswith("sglang::scheduler") or "multiprocessing.spawn" in p.cmdline)]
    return found if len(found) == 2 else None


@pytest.fixture
def folders():
    made = []
    yield made
    for folder in made:
        shutil.rmtree(folder, ignore_errors=True)


def wait_listening(port):
    return wait_for(lambda: _listeners.listeners(port, _procfs.snapshot()), 15)


@pytest.fixture
def server(spawn, tmp_path):
    def start(*args, preexec_fn=None, port=None, **knobs):
        port = port or free_port()
        env = dict(os.environ, PYTHONPATH=DOUBLE, SGLANG_DOUBLE_STATE_FILE=str(tmp_path / "state.jsonl"),
                   SGLANG_DOUBLE_LOAD_SECONDS="1", SGLANG_DOUBLE_WARMUP_SECONDS="0.5", SGLANG_DOUBLE_HEALTH_SECONDS="1")
        env.update({"SGLANG_DOUBLE_" + k.upper(): str(v) for k, v in knobs.items()})
        p = subprocess.Popen([sys.executable, "-m", "sglang.launch_server", "--model-path", "/models/m", "--tp", "1",
                              "--port", str(port), "--served-model-name", spawn.marker, *args],
                             env=env, stdout=open(tmp_path / "log", "wb"), stderr=subprocess.STDOUT, preexec_fn=preexec_fn)
        spawn.procs.append(p)
        p.url = "http://127.0.0.1:%d" % port
        p.marker = spawn.marker  # its served model name
        p.events = lambda: dict((e["event"], e["time"]) for e in map(json.loads, open(tmp_path / "state.jsonl")))
        return p
    return start


@pytest.fixture
def two_nodes(server):
    """The two ranks of one `--tp 2 --nnodes 2` server of the double meeting on loopback, both listening on their
    --port (rank 0 its API, rank 1 its dummy health check): (rank 0, rank 1), each with `port` and `addr` (their
    --dist-init-addr)."""
    addr = "127.0.0.1:%d" % free_port()
    ranks = [server("--tp", "2", "--nnodes", "2", "--node-rank", str(r), "--dist-init-addr", addr) for r in (0, 1)]
    for p in ranks:
        p.port, p.addr = int(p.url.rsplit(":", 1)[1]), addr
        wait_listening(p.port)
    return ranks


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


class Kept:
    """Pages of files kept mapped while a test looks at their residency. A page of the page cache that no process
    maps may be dropped at any moment, with memory to spare: proactive reclaim (DAMON's pageout of cold unmapped
    pages, as some hosts and virtual machines run it) takes a page read a second ago when the region it lies in was
    cold, and mincore then finds it gone. A mapped page is not taken that way, nor under light pressure."""

    def __init__(self):
        self.maps = []

    def map(self, path, offset=0, length=None):
        """Map length bytes (the rest of the file when None) of path from offset (page-aligned) and touch each
        page: they are resident, and stay mapped until the test ends."""
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            length = size - offset if length is None else min(length, size - offset)
            if length <= 0:
                return
            m = mmap.mmap(f.fileno(), length, mmap.MAP_SHARED, mmap.PROT_READ, offset=offset)
        for i in range(0, length, mmap.PAGESIZE):
            m[i]  # pylint: disable=pointless-statement
        self.maps.append(m)

    def close(self):
        for m in self.maps:
            m.close()


@pytest.fixture
def kept(monkeypatch):
    """A Kept, with every window the page cache's warm reads whole kept mapped too (from the moment it was read:
    in the forked child that reads as the owner as well, until that child's answer is measured)."""
    k = Kept()
    real = _pagecache._read

    def read(files, path, offset, length, *rest):
        done = real(files, path, offset, length, *rest)
        if done:
            k.map(path, offset, length)
        return done
    monkeypatch.setattr(_pagecache, "_read", read)
    yield k
    k.close()


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
        self.no_log_values = set()

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


@pytest.fixture
def public_dir():
    """A folder under /tmp every user can reach (tmp_path is root's and 0700), removed afterwards."""
    d = tempfile.mkdtemp(prefix="inferops-public-", dir="/tmp")
    os.chmod(d, 0o755)
    yield pathlib.Path(d)
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def home(public_dir):
    """A folder of nobody's (where its log is), in public_dir."""
    d = public_dir / "home"
    d.mkdir()
    os.chown(str(d), NOBODY.pw_uid, NOBODY.pw_gid)
    return d


def chown_tree(path, uid, gid):
    for base, dirs, files in os.walk(str(path)):
        for n in [base] + [os.path.join(base, x) for x in dirs + files]:
            os.lchown(n, uid, gid)


def double_venv(folder, evil=None):
    """A venv of the system's python in folder/venv, the double installed in it (with its metadata); with `evil` (a
    file every user can write), a zz_evil.pth that appends the uid it runs as to it."""
    venv = folder / "venv"
    subprocess.run(["/usr/bin/python3", "-m", "venv", "--without-pip", str(venv)], check=True)
    site = pathlib.Path(subprocess.check_output(
        [str(venv / "bin" / "python"), "-I", "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        universal_newlines=True).strip())
    shutil.copytree(str(ROOT / "tests" / "sglang_double" / "sglang"), str(site / "sglang"))
    meta = site / "sglang-0.5.23.dist-info"
    meta.mkdir()
    (meta / "METADATA").write_text("Metadata-Version: 2.1\nName: sglang\nVersion: 0.5.23\n")
    if evil:
        evil.touch()
        evil.chmod(0o666)
        (site / "zz_evil.pth").write_text("import os; open(%r, 'a').write('%%d\\n' %% os.getuid())\n" % str(evil))
    return Venv(venv, site, evil)


@pytest.fixture
def nobody_venv(public_dir):
    """double_venv owned by nobody, with its zz_evil.pth (Venv.ran_as: the uids it ran as)."""
    venv = double_venv(public_dir, public_dir / "uids")
    chown_tree(venv.path, NOBODY.pw_uid, NOBODY.pw_gid)
    return venv


class Venv:
    def __init__(self, path, site, uids):
        self.path, self.site, self.uids = path, site, uids
        self.python = str(path / "bin" / "python")

    def ran_as(self):
        """The uids zz_evil.pth saw, in order."""
        return [int(x) for x in self.uids.read_text().split()]


class ProcessModule(FakeModule):
    """What the managers of process_kill, process_count and gpu_release use of AnsibleModule."""

    defaults = dict(state="released", gpus=None, timeout=10.0, signal="TERM", escalate="KILL", grace=5.0, pid=None,
                    pattern=None, user=None, exclude=[], max_targets=64, protect=[], unprotect=[], redact=[], tree=True,
                    mode="all", expect=None)


def exited(manager):
    """What manager.run() exits with (exit_json's result)."""
    with pytest.raises(Exited) as e:
        manager.run()
    return e.value.args[0]


def alive(*pids):
    """The pids that still run (zombies do not)."""
    return [pid for pid in pids if _procfs.read(pid) is not None and not _procfs.read(pid).is_zombie]
