"""The double's own settings, from SGLANG_DOUBLE_* variables, so that the command line stays exactly the real one."""
import os
import sys

VERSIONS = ("0.5.5", "0.5.9", "0.5.15", "0.5.17", "0.5.23")
FAULTS = frozenset({
    "ignore_sigterm",     # SIGTERM is logged and ignored: only SIGKILL ends the server
    "orphan_workers",     # schedulers detach at start-up (new session, reparented): a parent kill misses them
    "untitled_orphan",    # one extra untitled spawn child that detaches (new session, reparented) holding a GPU
    "crash_during_load",  # the main process fails while loading (exit 1), the tree follows
    "never_healthy",      # stays in warm-up: /health 503 for ever
    "empty_generation",   # every generation's first token ends the sequence: 200 with empty text, one token
})

# the real wheels' console scripts (entry_points.txt), with the first version that has each; the double's
# pyproject.toml installs them all, and killall_sglang refuses to run as a version that lacks it
CONSOLE_SCRIPTS = {
    "sglang": ("sglang.cli.main:main", "0.5.5"),
    "killall_sglang": ("sglang.cli.killall:main", "0.5.15"),
}


def console_scripts(version):
    return {name: target for name, (target, since) in CONSOLE_SCRIPTS.items() if at_least(version, since)}


def vkey(version):
    return tuple(int(p) for p in version.split("."))


def installed_version():
    """The version of the double's own installed distribution (`sglang X+double`: tests/testbed/wheels.sh builds one
    wheel a version, so `pip install -U` upgrades it as it does the real one), or None (run from the source tree,
    or another distribution named sglang is what importlib finds)."""
    try:
        from importlib import metadata  # pylint: disable=import-outside-toplevel
        found = metadata.version("sglang")
    except Exception:  # pylint: disable=broad-except
        return None
    public, dummy, local = found.partition("+")
    return public if local == "double" else None


def emulated_version():
    """SGLANG_DOUBLE_VERSION, else the venv's own setting (a file `sglang-double-version` in sys.prefix: the
    version "installed" there, for clients such as bench_serving that run without the server's environment),
    else the version of the wheel installed (installed_version), else 0.5.23."""
    version = os.environ.get("SGLANG_DOUBLE_VERSION")
    if not version:
        try:
            with open(os.path.join(sys.prefix, "sglang-double-version")) as f:
                version = f.read().strip()
        except OSError:
            version = installed_version() or "0.5.23"
    if version not in VERSIONS:
        raise SystemExit("SGLANG_DOUBLE_VERSION must be one of %s, not %r" % (", ".join(VERSIONS), version))
    return version


def at_least(version, than):
    return vkey(version) >= vkey(than)


class Knobs:
    """The double's own settings, read once from the environment."""

    def __init__(self, environ=None):
        env = os.environ if environ is None else environ
        self.version = emulated_version()
        self.load_seconds = float(env.get("SGLANG_DOUBLE_LOAD_SECONDS", "3"))
        self.warmup_seconds = float(env.get("SGLANG_DOUBLE_WARMUP_SECONDS", "1"))
        self.health_seconds = float(env.get("SGLANG_DOUBLE_HEALTH_SECONDS", "1"))
        self.token_seconds = float(env.get("SGLANG_DOUBLE_TOKEN_SECONDS", "0.002"))
        # a prompt's prefill, per prompt token (a word here), in the first scheduler: its CPU busy, no output meanwhile
        self.prefill_seconds_per_token = float(env.get("SGLANG_DOUBLE_PREFILL_SECONDS_PER_TOKEN", "0"))
        # /health_generate's wait for any output of the schedulers: the real variable and default (every version's
        # sglang/srt/entrypoints/http_server.py: `int(os.getenv("SGLANG_HEALTH_CHECK_TIMEOUT", 20))`)
        self.health_check_timeout = int(env.get("SGLANG_HEALTH_CHECK_TIMEOUT", "20"))
        self.watchdog_seconds = float(env.get("SGLANG_DOUBLE_WATCHDOG_SECONDS", "5"))
        # 0.5.15+ notice a scheduler killed by a signal: while loading when a 5 s poll of the scheduler pipes
        # times out (sglang/srt/entrypoints/engine.py: 0.5.15 line 1380, 0.5.23 line 2025,
        # `scheduler_pipe_readers[i].poll(timeout=5.0)`), once serving through SubprocessWatchdog, which
        # checks every second (sglang/srt/utils/watchdog.py line 181, `interval: float = 1.0`).
        self.load_poll_seconds = float(env.get("SGLANG_DOUBLE_LOAD_POLL_SECONDS", "5"))
        self.liveness_seconds = float(env.get("SGLANG_DOUBLE_LIVENESS_SECONDS", "1"))
        # The warm-up thread (sglang/srt/entrypoints/http_server.py _execute_server_warmup, every version: `for _ in
        # range(120): time.sleep(1); requests.get(url + "/model_info", timeout=5)`) gives up after 120 tries and
        # SIGKILLs the tree and itself. It outlives a failed bind (uvicorn's shutdown waits for it) and a SIGTERM
        # before the first generate: 120 tries is the real life of both; the double's default is short.
        self.warmup_tries = int(env.get("SGLANG_DOUBLE_WARMUP_TRIES", "3"))
        self.warmup_retry_seconds = float(env.get("SGLANG_DOUBLE_WARMUP_RETRY_SECONDS", "1"))
        # 0.5.15+: a child lost once serving triggers SIGQUIT; its handler sleeps 5 s ("before crash diagnostics",
        # sglang/srt/managers/tokenizer_manager.py dump_requests_before_crash), the event loop blocked: no answers
        self.crash_sleep_seconds = float(env.get("SGLANG_DOUBLE_CRASH_SLEEP_SECONDS", "5"))
        # --nnodes > 1 without --dist-timeout: how long the rendezvous at --dist-init-addr waits for every rank
        # (torch.distributed's default for the NCCL backend, 10 minutes; sglang/_double/nodes.py says where)
        self.dist_timeout_seconds = float(env.get("SGLANG_DOUBLE_DIST_TIMEOUT_SECONDS", "600"))
        # the weights' read, after the start-up above: the engine's "Load weight end. elapsed=..." from the disk, and
        # the weight cache daemon's "Model loaded from disk in ...s" (0.5.17 on)
        self.weight_load_seconds = float(env.get("SGLANG_DOUBLE_WEIGHT_LOAD_SECONDS", "0.2"))
        # --weight-cache-mode client: how often the engine's watchdog checks the daemon's pid (0.5.17
        # sglang/srt/weight_cache/ipc_loader.py:40, 0.5.23 :43, `_DAEMON_LIVENESS_POLL_INTERVAL = 5.0`)
        self.weight_cache_poll_seconds = float(env.get("SGLANG_DOUBLE_WEIGHT_CACHE_POLL_SECONDS", "5"))
        self.read_model = env.get("SGLANG_DOUBLE_READ_MODEL", "") == "1"
        self.device_globs = env.get("SGLANG_DOUBLE_DEVICES", "").split()
        self.state_file = env.get("SGLANG_DOUBLE_STATE_FILE") or None
        self.cuda_gib = float(env.get("SGLANG_DOUBLE_CUDA_GIB", "0"))  # real-GPU mode: per scheduler
        self.orphan_cuda_gib = float(env.get("SGLANG_DOUBLE_ORPHAN_CUDA_GIB", "0"))  # and for the untitled orphan
        faults = {f.strip() for f in env.get("SGLANG_DOUBLE_FAULTS", "").split(",") if f.strip()}
        unknown = faults - FAULTS
        if unknown:
            raise SystemExit("unknown SGLANG_DOUBLE_FAULTS: %s (known: %s)" % (", ".join(sorted(unknown)), ", ".join(sorted(FAULTS))))
        self.faults = faults

    def at_least(self, version):
        return at_least(self.version, version)
