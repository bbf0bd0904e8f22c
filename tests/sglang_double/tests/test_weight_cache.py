"""The double's weight cache daemon and the engine's --weight-cache-mode client (0.5.17 on), as real processes.

0.5.17's paths are fixed under /tmp; SGLANG_DOUBLE_WEIGHT_CACHE_ROOT moves them into the test's directory (tests only).
Timings are short; every wait is for a state (a file, an exit, a port), with generous limits for a loaded host."""
import contextlib
import json
import os
import pathlib
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile

import pytest

from tests.sglang_double.tests.conftest import DOUBLE, Double, alive, open_files, wait_for

FAST = {"SGLANG_DOUBLE_LOAD_SECONDS": "0.2", "SGLANG_DOUBLE_WEIGHT_LOAD_SECONDS": "0.1"}
LONG = 30


@pytest.fixture
def wc(tmp_path):
    """Runs daemons and engines of one version in tmp_path; ends whatever it started."""
    procs = []

    class WC:
        root = tmp_path / "tmp"
        model = tmp_path / "model"

        def __init__(self):
            self.root.mkdir()
            self.model.mkdir()
            self.write_config()

        def write_config(self, **extra):
            cfg = {"architectures": ["LlamaForCausalLM"], "num_hidden_layers": 2, "torch_dtype": "bfloat16"}
            cfg.update(extra)
            (self.model / "config.json").write_text(json.dumps(cfg))

        def env(self, version="0.5.17", **extra):
            env = dict(os.environ, PYTHONPATH=str(DOUBLE), SGLANG_DOUBLE_VERSION=version,
                       SGLANG_DOUBLE_WEIGHT_CACHE_ROOT=str(self.root), **FAST)
            env.pop("PYTORCH_CUDA_ALLOC_CONF", None)
            env.update(extra)
            return env

        def daemon(self, *args, version="0.5.17", env=None, name="daemon"):
            log = tmp_path / ("%s.log" % name)
            p = subprocess.Popen([sys.executable, "-m", "sglang.srt.weight_cache.daemon", "--model-path",
                                  str(self.model), *args], env=env or self.env(version), stdout=log.open("wb"),
                                 stderr=subprocess.STDOUT, start_new_session=True)
            p.log = log
            procs.append(p)
            return p

        def path(self, rank, ext):
            return self.root / ("sglang_weight_cache_rank%d.%s" % (rank, ext))

        def wait_ready(self, *ranks):
            """Until each rank's ready file names its pid and its socket answers a ping. The daemon opens the ready
            file before it writes it, then logs `Listening on`, then sets its SIGTERM handler, then accepts (0.5.17
            daemon.py:404-467): a file that exists may still be empty, and a signal sent before the accept loop
            finds no handler."""
            for r in ranks:
                assert wait_for(lambda r=r: ready_pid(self.path(r, "ready")) is not None and answers(self.path(r, "sock")),
                                LONG), "rank %d never ready" % r

        def engine(self, *args, version="0.5.17", tp=1, model=None, **knobs):
            knobs.setdefault("load_seconds", 0.2)
            knobs.setdefault("weight_load_seconds", 0.1)
            knobs.setdefault("weight_cache_root", str(self.root))
            d = Double(tmp_path / ("engine%d" % len(procs)), args=args, tp=tp, model=model or self.model, version=version,
                       **knobs)
            procs.append(d.proc)
            return d

    yield WC()
    for p in procs:
        if p.poll() is None:
            try:
                os.killpg(p.pid, signal.SIGKILL) if getattr(p, "log", None) else p.kill()
            except ProcessLookupError:
                pass
            p.wait()
    for pid in _ready_pids(tmp_path / "tmp"):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def _ready_pids(root):
    return [pid for pid in map(ready_pid, root.glob("*.ready") if root.exists() else []) if pid is not None]


def ready_pid(path):
    """The pid a ready file names, None while there is no file or it has no whole `pid=` line yet."""
    try:
        lines = path.read_text().splitlines(keepends=True)
    except FileNotFoundError:
        return None
    pid = [line[4:].strip() for line in lines if line.startswith("pid=") and line.endswith("\n")]
    return int(pid[0]) if pid else None


def ping(path):
    with socket.socket(socket.AF_UNIX) as s:
        s.settimeout(10)
        s.connect(str(path))
        body = json.dumps({"type": "ping"}).encode()
        s.sendall(len(body).to_bytes(4, "big") + body)
        n = int.from_bytes(s.recv(4), "big")
        return json.loads(s.recv(n))


def answers(path):
    """Whether the daemon at path answers a ping (it does only from its accept loop on)."""
    try:
        return ping(path) == {"status": "ok"}
    except (OSError, ValueError):
        return False


@contextlib.contextmanager
def serving(path, pid):
    """While the daemon pid serves a connection that says nothing (it waits CLIENT_CONNECTION_TIMEOUT for it), once
    it holds its listening socket alone (the ping's connection closed), then that one too.
    Its loop looks at its SIGTERM handler's flag only between connections and at each 1 s timeout of its accept
    (0.5.17 daemon.py:440-460): a signal sent there would end it before the launcher's death SIGKILLs it (the
    flag's look right after the ready file, or after the ping of wait_ready); one sent while it serves cannot."""
    def sockets():
        return sum(target.startswith("socket:") for target in open_files(pid))
    assert wait_for(lambda: sockets() == 1, LONG), "the daemon %d still serves another connection" % pid
    with socket.socket(socket.AF_UNIX) as s:
        s.connect(str(path))
        assert wait_for(lambda: sockets() == 2, LONG), "the daemon %d never took the connection" % pid
        yield


def exited(p, timeout=LONG):
    assert wait_for(lambda: p.poll() is not None, timeout), "still running"
    return p.returncode


def text(p):
    return p.log.read_text()


# --- the module and the CLI --------------------------------------------------------------------------------------
@pytest.mark.parametrize("version", ["0.5.9", "0.5.15"])
def test_no_weight_cache_before_0517(wc, version):
    p = wc.daemon("--tp-size", "1", version=version)
    assert exited(p) == 1
    assert "No module named 'sglang.srt.weight_cache'" in text(p)


def test_the_daemon_cli_refuses_an_unknown_option_and_tp(wc):
    p = wc.daemon("--tp-size", "1", "--bogus")
    assert exited(p) == 2 and "unrecognized arguments: --bogus" in text(p)
    # the server's --tp is ambiguous here: 0.5.17's parser has --tp-size and --tp-rank (daemon.py:820, :828)
    p = wc.daemon("--tp", "1", name="tp")
    assert exited(p) == 2 and "ambiguous option: --tp could match --tp-size, --tp-rank" in text(p)


def test_launcher_runs_a_rank_daemon_per_rank_and_exits_1_when_one_dies(wc, tmp_path):
    state = tmp_path / "state.jsonl"
    p = wc.daemon("--tp-size", "2", env=wc.env(SGLANG_DOUBLE_STATE_FILE=str(state)))
    wc.wait_ready(0, 1)
    # the launcher has seen both ready files (it looks every 2 s, daemon.py:735-772) and now watches its ranks
    assert wait_for(lambda: state.exists() and "daemons_ready" in state.read_text(), LONG)
    pids = [ready_pid(wc.path(r, "ready")) for r in (0, 1)]
    for r, pid in enumerate(pids):
        assert open("/proc/%d/stat" % pid).read().split(") ")[1].split()[1] == str(p.pid)  # the launcher's children
        cmd = open("/proc/%d/cmdline" % pid).read().split("\0")
        assert cmd[1:3] == ["-m", "sglang.srt.weight_cache.daemon"] and cmd[cmd.index("--tp-rank") + 1] == str(r)
        assert stat.S_ISSOCK(os.lstat(wc.path(r, "sock")).st_mode)
        assert stat.S_IMODE(os.lstat(wc.path(r, "sock")).st_mode) == 0o600
        lines = wc.path(r, "ready").read_text().splitlines()
        assert lines[0] == "pid=%d" % pid and lines[1].startswith("config={'model_path': '%s'" % wc.model)
        assert "'tp_rank': %d" % r in lines[1] and "'dtype': 'torch.bfloat16'" in lines[1]
    assert ping(wc.path(0, "sock")) == {"status": "ok"}
    os.kill(pids[1], signal.SIGKILL)
    assert exited(p) == 1
    assert "Weight cache daemon (pid=%d) exited with code -9; terminated the remaining daemons." % pids[1] in text(p)
    # rank 0 took the launcher's SIGTERM: its handler removed its files; the SIGKILLed rank 1 left its own
    assert not wc.path(0, "sock").exists() and not wc.path(0, "ready").exists()
    assert wc.path(1, "sock").exists() and wc.path(1, "ready").exists()
    assert "Received signal 15, shutting down" in text(p)


def test_a_rank_daemon_dies_with_the_launcher(wc):
    p = wc.daemon("--tp-size", "1")
    wc.wait_ready(0)
    rank = ready_pid(wc.path(0, "ready"))
    os.kill(p.pid, signal.SIGKILL)
    assert wait_for(lambda: not alive(rank), LONG)  # PR_SET_PDEATHSIG=SIGKILL
    assert wc.path(0, "sock").exists() and wc.path(0, "ready").exists()


def test_sigterm_to_the_group_leaves_the_socket_and_ready_file(wc):
    p = wc.daemon("--tp-size", "1")
    wc.wait_ready(0)
    rank = ready_pid(wc.path(0, "ready"))
    with serving(wc.path(0, "sock"), rank):
        os.killpg(p.pid, signal.SIGTERM)
        assert exited(p) == -signal.SIGTERM
        assert wait_for(lambda: not alive(rank), LONG)
    assert wc.path(0, "sock").exists() and wc.path(0, "ready").exists()  # day2.md: both left, the pid dead


def test_single_rank_mode_and_its_sigterm(wc):
    p = wc.daemon("--gpu-id", "0", "--tp-size", "1")
    wc.wait_ready(0)
    assert ready_pid(wc.path(0, "ready")) == p.pid
    assert "[Daemon gpu=0 tp_rank=0] INFO [WeightCacheDaemon gpu=0] Listening on %s" % wc.path(0, "sock") in text(p)
    p.send_signal(signal.SIGTERM)
    assert exited(p) == 0
    assert not wc.path(0, "sock").exists() and not wc.path(0, "ready").exists()
    assert "Shutdown complete" in text(p)


def test_a_live_daemon_is_refused_unless_force(wc):
    first = wc.daemon("--tp-size", "1", name="first")
    wc.wait_ready(0)
    rank = ready_pid(wc.path(0, "ready"))
    second = wc.daemon("--tp-size", "1", name="second")
    assert exited(second) == 1
    assert ("RuntimeError: Weight cache daemon for rank 0 is already running (pid=%d, ready=%s)"
            % (rank, wc.path(0, "ready"))) in text(second)
    assert alive(rank) and ready_pid(wc.path(0, "ready")) == rank
    third = wc.daemon("--tp-size", "1", "--force", name="third")
    assert wait_for(lambda: not alive(rank), LONG)
    assert "[weight_cache] force takeover: killing existing daemon pid=%d for rank 0" % rank in text(third)
    assert wait_for(lambda: ready_pid(wc.path(0, "ready")) not in (None, rank), LONG)
    assert exited(first) == 1  # its rank daemon was killed under it
    assert third.poll() is None


def test_a_dead_daemons_files_are_removed_at_the_next_launch(wc):
    wc.path(0, "ready").write_text("pid=%d\nconfig={}\n" % _dead_pid())
    s = socket.socket(socket.AF_UNIX)
    s.bind(str(wc.path(0, "sock")))
    s.close()  # a socket file nobody listens on
    p = wc.daemon("--tp-size", "1")
    assert wait_for(lambda: ready_pid(wc.path(0, "ready")) not in (None, _dead_pid()), LONG)
    assert ping(wc.path(0, "sock")) == {"status": "ok"} and p.poll() is None


_DEAD = []


def _dead_pid():
    if not _DEAD:
        q = subprocess.Popen(["true"])
        q.wait()
        _DEAD.append(q.pid)
    return _DEAD[0]


def test_expandable_segments_are_refused(wc):
    conf = "garbage_collection_threshold:0.6,expandable_segments:True"
    p = wc.daemon("--gpu-id", "0", env=wc.env(PYTORCH_CUDA_ALLOC_CONF=conf))
    assert exited(p) == 1
    assert ("RuntimeError: [WeightCacheDaemon] PYTORCH_CUDA_ALLOC_CONF sets expandable_segments:True, which is "
            "incompatible with CUDA IPC weight sharing") in text(p)
    assert not wc.path(0, "sock").exists()


@pytest.mark.parametrize("quant,ok", [
    ({"quant_method": "fp8", "weight_block_size": [128, 128]}, True),
    ({"quant_method": "fp8"}, False),
    ({"quant_method": "awq", "bits": 4}, False),
])
def test_the_quantization_allowlist(wc, quant, ok):
    wc.write_config(quantization_config=quant)
    p = wc.daemon("--gpu-id", "0")
    if ok:
        wc.wait_ready(0)
        assert "'quant_method': 'fp8'" in wc.path(0, "ready").read_text()
        return
    assert exited(p) == 1
    assert ("UnsupportedQuantForIPCError: [weight_cache:daemon] quantization method %r is not verified for CUDA IPC "
            "zero-copy weight sharing." % quant["quant_method"]) in text(p)
    assert "Verified methods: '' (unquantized), 'fp8'." in text(p)


# --- the engine --------------------------------------------------------------------------------------------------
def test_the_engine_maps_the_daemons_weights(wc):
    wc.daemon("--tp-size", "2")
    wc.wait_ready(0, 1)
    d = wc.engine("--weight-cache-mode", "client", tp=2)
    d.wait_ready(timeout=LONG)
    log = d.log.read_text()
    assert "[IpcModelLoader] Zero-copy: mapped 16 tensors" in log
    for r in (0, 1):
        assert "TP%d] [IpcModelLoader] Requesting weights from daemon at %s" % (r, wc.path(r, "sock")) in log
    ends = [l for l in log.splitlines() if "Load weight end. elapsed=" in l]
    assert len(ends) == 2 and all(float(l.split("elapsed=")[1].split(" ")[0]) < 0.1 for l in ends)
    assert "falling back" not in log


def test_the_engine_reads_the_disk_without_a_daemon(wc):
    d = wc.engine("--weight-cache-mode", "client", weight_load_seconds=0.5)
    d.wait_ready(timeout=LONG)
    log = d.log.read_text()
    assert "[IpcModelLoader] Daemon socket not found at %s." % wc.path(0, "sock") in log
    assert "[IpcModelLoader] Weight cache not available or config mismatch, falling back to disk load" in log
    assert float(log.split("Load weight end. elapsed=")[1].split(" ")[0]) >= 0.5


def test_an_engine_without_the_cache_logs_its_disk_load(wc):
    d = wc.engine(weight_load_seconds=0.3)
    d.wait_ready(timeout=LONG)
    log = d.log.read_text()
    assert "Load weight end. elapsed=0.3" in log and "IpcModelLoader" not in log


def test_a_dead_daemons_socket_fails_the_engine_without_fallback(wc):
    p = wc.daemon("--gpu-id", "0")
    wc.wait_ready(0)
    p.kill()
    exited(p)
    d = wc.engine("--weight-cache-mode", "client")
    assert exited(d.proc) == -signal.SIGKILL
    log = d.log.read_text()
    assert ("[IpcModelLoader] Daemon socket exists at %s but refused the connection. The daemon may have crashed after "
            "creating the socket. Check daemon logs." % wc.path(0, "sock")) in log
    assert "falling back" not in log and "Load weight end" not in log and "fired up" not in log


def test_a_mismatched_config_ends_the_engine_and_the_daemon_serves_on(wc):
    p = wc.daemon("--gpu-id", "0", "--dtype", "float16")
    wc.wait_ready(0)
    d = wc.engine("--weight-cache-mode", "client")
    assert exited(d.proc) == -signal.SIGKILL
    log = d.log.read_text()
    assert "RuntimeError: [IpcModelLoader] Daemon config mismatch!\n  Engine config: {" in log
    assert "'dtype': 'torch.bfloat16'" in log and "'dtype': 'torch.float16'" in log
    assert "falling back" not in log and "fired up" not in log
    assert p.poll() is None and ping(wc.path(0, "sock")) == {"status": "ok"}
    assert "Config mismatch: {'dtype': ('torch.float16', 'torch.bfloat16')}" in text(p)


def test_a_model_path_spelled_otherwise_is_a_mismatch(wc):
    wc.daemon("--gpu-id", "0")
    wc.wait_ready(0)
    d = wc.engine("--weight-cache-mode", "client", model=str(wc.model) + "/")
    assert exited(d.proc) == -signal.SIGKILL
    assert "Daemon config mismatch!" in d.log.read_text()


def test_the_engines_watchdog_ends_it_when_the_daemon_dies(wc):
    p = wc.daemon("--gpu-id", "0")
    wc.wait_ready(0)
    d = wc.engine("--weight-cache-mode", "client", weight_cache_poll_seconds=0.5, crash_sleep_seconds=0.2)
    d.wait_ready(timeout=LONG)
    p.kill()
    p.wait()  # reaped, as its parent (systemd, the launcher) does: a zombie's pid still answers kill(pid, 0)
    assert exited(d.proc) == -signal.SIGKILL
    assert ("[IpcModelLoader] Weight cache daemon (pid=%d) died while this engine holds its weights via CUDA IPC."
            % p.pid) in d.log.read_text()


def test_weight_cache_socket_points_the_engine_elsewhere(wc):
    wc.daemon("--gpu-id", "0")
    wc.wait_ready(0)
    moved = wc.root / "moved.sock"
    os.rename(wc.path(0, "sock"), moved)
    d = wc.engine("--weight-cache-mode", "client", "--weight-cache-socket", str(moved))
    d.wait_ready(timeout=LONG)
    assert "Requesting weights from daemon at %s" % moved in d.log.read_text()


def test_speculative_decoding_is_refused(wc):
    d = wc.engine("--weight-cache-mode", "client", "--speculative-algorithm", "EAGLE")
    assert exited(d.proc) == 1
    assert ("ValueError: --weight-cache-mode is not supported together with speculative decoding "
            "(--speculative-algorithm)") in d.log.read_text()


def test_the_option_does_not_exist_before_0517(wc):
    d = wc.engine("--weight-cache-mode", "client", version="0.5.15")
    assert exited(d.proc) == 2 and "unrecognized arguments: --weight-cache-mode" in d.log.read_text()


def test_the_client_refuses_an_unsupported_quantization(wc):
    wc.write_config(quantization_config={"quant_method": "awq", "bits": 4})
    d = wc.engine("--weight-cache-mode", "client")
    assert exited(d.proc) == -signal.SIGKILL
    assert "[weight_cache:client] quantization method 'awq' is not verified" in d.log.read_text()


# --- 0.5.23: paths from the environment, keyed by the GPU ------------------------------------------------------
@pytest.fixture
def short_dir():
    d = tempfile.mkdtemp(prefix="wc", dir="/tmp")  # AF_UNIX paths are at most 107 bytes: the UUID takes 40
    yield pathlib.Path(d)
    shutil.rmtree(d, ignore_errors=True)


def test_0523_paths_follow_the_templates_and_the_gpu(wc, short_dir):
    env = wc.env("0.5.23", SGLANG_WEIGHT_CACHE_SOCKET_TEMPLATE=str(short_dir / "{device_uuid}.sock"),
                 SGLANG_WEIGHT_CACHE_READY_TEMPLATE=str(short_dir / "{device_uuid}.ready"),
                 CUDA_VISIBLE_DEVICES="3")
    wc.daemon("--tp-size", "1", env=env)
    ready = short_dir / "GPU-00d0b1e0-0000-4000-8000-000000000003.ready"
    assert wait_for(ready.exists, LONG)
    assert "'moe_a2a_backend': 'none'" in ready.read_text() and "'torch_version': '2.14.1'" in ready.read_text()
    d = wc.engine("--weight-cache-mode", "client", version="0.5.23", tp=1,
                  env={k: env[k] for k in env if k.startswith(("SGLANG_WEIGHT", "CUDA_"))})
    d.wait_ready(timeout=LONG)
    assert "Zero-copy: mapped" in d.log.read_text()


def test_0523_refuses_a_template_without_the_gpu(wc):
    env = wc.env("0.5.23", SGLANG_WEIGHT_CACHE_SOCKET_TEMPLATE=str(wc.root / "one.sock"))
    p = wc.daemon("--tp-size", "1", env=env)
    assert exited(p) == 1
    assert ("ValueError: SGLANG_WEIGHT_CACHE_SOCKET_TEMPLATE='%s' must contain '{device_uuid}'"
            % (wc.root / "one.sock")) in text(p)
