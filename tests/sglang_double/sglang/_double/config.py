"""What the double is told: the real server's argv, and its own knobs from SGLANG_DOUBLE_* variables.

The knobs live in the environment so that the command line stays exactly the real one.
"""
import argparse
import os

VERSIONS = ("0.5.5", "0.5.9", "0.5.15", "0.5.23")
FAULTS = frozenset({
    "ignore_sigterm",     # SIGTERM is logged and ignored: only SIGKILL ends the server
    "orphan_workers",     # schedulers detach at start-up (new session, reparented): a parent kill misses them
    "untitled_orphan",    # one extra untitled spawn child that detaches (new session, reparented) holding a GPU
    "crash_during_load",  # the main process fails while loading (exit 1), the tree follows
    "never_healthy",      # stays in warm-up: /health 503 for ever
})


def _vkey(version):
    return tuple(int(p) for p in version.split("."))


def emulated_version():
    version = os.environ.get("SGLANG_DOUBLE_VERSION", "0.5.23")
    if version not in VERSIONS:
        raise SystemExit("SGLANG_DOUBLE_VERSION must be one of %s, not %r" % (", ".join(VERSIONS), version))
    return version


class Knobs:
    """The double's own settings, read once from the environment."""

    def __init__(self, environ=None):
        env = os.environ if environ is None else environ
        self.version = emulated_version()
        self.load_seconds = float(env.get("SGLANG_DOUBLE_LOAD_SECONDS", "3"))
        self.warmup_seconds = float(env.get("SGLANG_DOUBLE_WARMUP_SECONDS", "1"))
        self.health_seconds = float(env.get("SGLANG_DOUBLE_HEALTH_SECONDS", "1"))
        self.token_seconds = float(env.get("SGLANG_DOUBLE_TOKEN_SECONDS", "0.002"))
        self.watchdog_seconds = float(env.get("SGLANG_DOUBLE_WATCHDOG_SECONDS", "5"))
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
        return _vkey(self.version) >= _vkey(version)


def parse_args(argv, version):
    """The real server's argparse, for the flags operators use; unknown flags exit 2 as there."""
    p = argparse.ArgumentParser(prog="launch_server.py", allow_abbrev=True)
    p.add_argument("--model-path", "--model", dest="model_path", required=True)
    p.add_argument("--tokenizer-path")
    p.add_argument("--served-model-name")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=30000)
    p.add_argument("--tp-size", "--tp", dest="tp_size", type=int, default=1)
    p.add_argument("--dp-size", "--dp", dest="dp_size", type=int, default=1)
    p.add_argument("--base-gpu-id", type=int, default=0)
    p.add_argument("--api-key")
    p.add_argument("--mem-fraction-static", type=float)
    p.add_argument("--context-length", type=int)
    p.add_argument("--max-running-requests", type=int)
    p.add_argument("--chunked-prefill-size", type=int)
    p.add_argument("--trust-remote-code", action="store_true")
    p.add_argument("--dtype")
    p.add_argument("--kv-cache-dtype")
    p.add_argument("--quantization")
    p.add_argument("--attention-backend")
    p.add_argument("--log-level")
    p.add_argument("--disable-cuda-graph", action="store_true")
    p.add_argument("--enable-metrics", action="store_true")
    p.add_argument("--speculative-algorithm")
    p.add_argument("--speculative-num-steps", type=int)
    p.add_argument("--speculative-eagle-topk", type=int)
    p.add_argument("--speculative-num-draft-tokens", type=int)
    p.add_argument("--speculative-draft-model-path")
    p.add_argument("--cuda-graph-bs", type=int, nargs="+")
    if _vkey(version) >= (0, 5, 23):
        # 0.5.23 split the flag in two, so the old spelling is an ambiguous prefix: argparse exits 2.
        p.add_argument("--cuda-graph-max-bs-decode", type=int)
        p.add_argument("--cuda-graph-max-bs-prefill", type=int)
    else:
        p.add_argument("--cuda-graph-max-bs", type=int)
    if _vkey(version) < (0, 5, 15):
        p.add_argument("--enable-piecewise-cuda-graph", action="store_true")
    args = p.parse_args(argv)
    if args.tp_size < 1 or args.dp_size < 1:
        p.error("--tp-size and --dp-size must be >= 1")
    return args
