"""The main process: `python -m sglang.launch_server`, as ../shared/reference/sglang-behaviour.md describes it.

Phases: loading (port closed) -> warm-up (/model_info and /v1/models 200, /health 503) -> ready.
SIGTERM: while loading, death at once; once serving, a drain checked every 5 s, then 0.5.15 and
older SIGKILL their tree and themselves, 0.5.23 shuts the schedulers down and exits 0.
"""
import errno
import json
import multiprocessing
import os
import signal
import sys
import threading
import time
from datetime import datetime
from http.server import ThreadingHTTPServer

from sglang._double import workers
from sglang._double.config import Knobs, parse_args
from sglang._double.http import Handler


def log(msg):
    sys.stdout.write("[%s] %s\n" % (datetime.now().strftime("%Y-%m-%d %H:%M:%S"), msg))
    sys.stdout.flush()


class Server:
    def __init__(self, args, knobs):
        self.args = args
        self.knobs = knobs
        self.phase = "loading"
        self.draining = False
        self.inflight = 0
        self.lock = threading.Lock()
        self.children = []    # processes the tree kill takes
        self.leftovers = []   # fault-made processes it does not
        self.started = time.time()
        self.stopping = False  # set once the server ends its own children
        self.served_model_name = args.served_model_name or args.model_path

    # --- records -------------------------------------------------------------------------
    def record(self, event):
        if self.knobs.state_file:
            with open(self.knobs.state_file, "a", encoding="utf-8") as f:
                f.write(json.dumps({"event": event, "time": time.time(), "pid": os.getpid()}) + "\n")

    # --- processes -----------------------------------------------------------------------
    def spawn_children(self):
        ctx = multiprocessing.get_context("spawn")
        a, k = self.args, self.knobs
        detach = "orphan_workers" in k.faults
        pipes = []
        for rank in range(a.tp_size * a.dp_size):
            gpu = a.base_gpu_id + rank
            title = "sglang::scheduler_TP%d" % (rank % a.tp_size)
            if a.dp_size > 1:
                title = "sglang::scheduler_DP%d_TP%d" % (rank // a.tp_size, rank % a.tp_size)
            rx, tx = ctx.Pipe(duplex=False)
            p = ctx.Process(target=workers.run, name=title, daemon=False,
                            args=(title, workers.device_files(k.device_globs, gpu)),
                            kwargs={"detach": detach, "cuda_gib": k.cuda_gib, "gpu": gpu, "ready": tx})
            p.start()
            pipes.append(rx)
            (self.leftovers if detach else self.children).append(p)
        p = ctx.Process(target=workers.run, args=("sglang::detokenizer", []))
        p.start()
        self.children.append(p)
        if "untitled_orphan" in k.faults:
            rx, tx = ctx.Pipe(duplex=False)
            p = ctx.Process(target=workers.run,
                            args=("", workers.device_files(k.device_globs, a.base_gpu_id)),
                            kwargs={"untitled": True, "detach": True, "cuda_gib": k.orphan_cuda_gib,
                                    "gpu": a.base_gpu_id, "ready": tx})
            p.start()
            pipes.append(rx)
            self.leftovers.append(p)
        return pipes

    def child_died(self):
        if self.stopping:
            return False
        return any(p.exitcode is not None for p in self.children)

    def kill_tree(self, sig=signal.SIGKILL):
        self.stopping = True
        for p in self.children:
            try:
                os.kill(p.pid, sig)
            except ProcessLookupError:
                pass

    def die(self, code):
        self.kill_tree()
        os._exit(code)  # no multiprocessing atexit join: the real server does not wait either

    # --- signals -------------------------------------------------------------------------
    def on_sigterm(self, signum, frame):  # pylint: disable=unused-argument
        self.record("sigterm")
        if "ignore_sigterm" in self.knobs.faults:
            log("Received sigterm; ignoring it.")
            return
        if self.phase == "loading":
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGTERM)
            return
        log("Received sigterm, gracefully exiting (in-flight requests are drained first).")
        self.draining = True

    def watchdog(self):
        """The real sigterm_watchdog: wakes every 5 s; drains; then ends the server."""
        while not self.draining:
            time.sleep(self.knobs.watchdog_seconds)
        while True:
            with self.lock:
                remaining = self.inflight
            if not remaining:
                break
            log("Gracefully exiting... Remaining number of requests %d." % remaining)
            time.sleep(self.knobs.watchdog_seconds)
        self.record("stopped")
        if self.knobs.at_least("0.5.23"):
            log("Shutting down schedulers.")
            self.kill_tree(signal.SIGTERM)
            for p in self.children:
                p.join(15)
            os._exit(0)
        self.kill_tree()
        os.kill(os.getpid(), signal.SIGKILL)

    # --- life ----------------------------------------------------------------------------
    def run(self):
        a, k = self.args, self.knobs
        signal.signal(signal.SIGTERM, self.on_sigterm)
        log("server_args=%s" % {key: ("<redacted>" if key == "api_key" and v else v) for key, v in vars(a).items()})
        self.record("loading")
        pending = self.spawn_children()
        if os.environ.get("SGLANG_DOUBLE_READ_MODEL") == "1":
            read_model(a.model_path)  # real reads: the load takes what the page cache makes it take
        deadline = time.monotonic() + k.load_seconds
        crash_at = time.monotonic() + k.load_seconds / 2
        while time.monotonic() < deadline or pending:
            pending = [rx for rx in pending if not rx.poll()]
            if "crash_during_load" in k.faults and time.monotonic() >= crash_at:
                log("Scheduler hit an exception: RuntimeError: CUDA error: an illegal memory access was encountered")
                self.record("crashed")
                self.die(1)
            if self.child_died():
                log("Child process unexpectedly failed. Killing the process tree.")
                self.die(1)
            time.sleep(0.05)
        try:
            httpd = ThreadingHTTPServer((a.host, a.port), Handler)
        except OSError as e:
            if e.errno == errno.EADDRINUSE:
                log("[Errno 98] error while attempting to bind on address ('%s', %d): address already in use" % (a.host, a.port))
            else:
                log("error while attempting to bind on address ('%s', %d): %s" % (a.host, a.port, e))
            self.record("bind_failed")
            self.die(1)
        httpd.daemon_threads = True
        httpd.server = self
        self.phase = "warmup"
        self.record("warmup")
        log("Uvicorn running on http://%s:%d (Press CTRL+C to quit)" % (a.host, a.port))
        threading.Thread(target=httpd.serve_forever, daemon=True).start()
        threading.Thread(target=self.watchdog, daemon=True).start()
        if "never_healthy" not in k.faults:
            time.sleep(k.warmup_seconds)
            self.phase = "ready"
            self.record("ready")
            log("The server is fired up and ready to roll!")
        while True:
            if self.child_died():
                log("Child process unexpectedly failed. Killing the process tree.")
                self.die(1)
            time.sleep(0.5)


def read_model(path):
    """Read every file under path (or path itself), as a loader reads its weights."""
    files = [path] if os.path.isfile(path) else [os.path.join(d, n) for d, dummy, names in os.walk(path) for n in names]
    buf = bytearray(8 << 20)
    for name in sorted(files):
        with open(name, "rb", buffering=0) as f:
            while f.readinto(buf):
                pass


def main(argv):
    knobs = Knobs()
    args = parse_args(argv, knobs.version)
    Server(args, knobs).run()
    return 0
