"""The main process of `python -m sglang.launch_server` / `sglang serve`, as ../shared/reference/sglang-behaviour.md
describes the real one.

Phases: loading (port closed) -> warm-up (/model_info and /v1/models 200, /health 503) -> ready.
SIGTERM: while loading, death at once; once serving, a drain checked every 5 s, then 0.5.5/0.5.9 SIGKILL their
tree and themselves, 0.5.15 asks the schedulers to stop, waits up to 15 s for them, then SIGKILLs the tree and
itself, 0.5.23 asks, waits and exits 0. SIGINT: uvicorn stops, the children are SIGKILLed, exit 0 (while loading
the KeyboardInterrupt ends the process). A child killed by a signal: 0.5.5/0.5.9 never notice (loading blocks for
ever; once serving /health turns 503 and nothing exits); 0.5.15+ notice it and SIGKILL the tree and themselves.
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
from sglang._double.config import Knobs
from sglang._double.http import Handler

READ_CHUNK = 1 << 20


def log(msg):
    sys.stdout.write("[%s] %s\n" % (datetime.now().strftime("%Y-%m-%d %H:%M:%S"), msg))
    sys.stdout.flush()


def scheduler_title(version, dp_rank, tp_rank, pp_rank, ep_rank, args):
    """The real title: sglang/srt/managers/scheduler.py builds " DP{d}"... only for the parallelism in use
    (dp_rank exists only under the data-parallel controller), then replaces spaces by underscores.
    0.5.5 orders DP, TP, EP, PP; 0.5.9+ DP, PP, (ATTN_CP, MOE_DP,) TP, EP."""
    parts = {"DP": dp_rank if args.dp_size > 1 else None,
             "TP": tp_rank if args.tp_size > 1 else None,
             "PP": pp_rank if args.pp_size > 1 else None,
             "EP": ep_rank if args.ep_size > 1 else None}
    order = ("DP", "TP", "EP", "PP") if version == "0.5.5" else ("DP", "PP", "TP", "EP")
    return "sglang::scheduler" + "".join("_%s%d" % (k, parts[k]) for k in order if parts[k] is not None)


class Server:
    def __init__(self, args, knobs):
        self.args = args
        self.knobs = knobs
        self.phase = "loading"
        self.draining = False
        self.scheduler_lost = False  # 0.5.5/0.5.9: a child died and nothing noticed
        self.inflight = 0
        self.lock = threading.Lock()
        self.children = []    # processes the tree kill takes
        self.leftovers = []   # fault-made processes it does not
        self.started = time.time()
        self.stopping = False  # set once the server ends its own children
        self.httpd = None
        self.served_model_name = args.served_model_name or args.model_path

    # --- records -------------------------------------------------------------------------
    def record(self, event):
        if self.knobs.state_file:
            with open(self.knobs.state_file, "a", encoding="utf-8") as f:
                f.write(json.dumps({"event": event, "time": time.time(), "pid": os.getpid()}) + "\n")

    # --- processes -----------------------------------------------------------------------
    def scheduler_specs(self):
        """[(dp_rank, title, devices, kwargs)] of every scheduler, in the real launch order."""
        a, k = self.args, self.knobs
        specs = []
        for dp in range(a.dp_size):
            for pp in range(a.pp_size):
                for tp in range(a.tp_size):
                    gpu = a.base_gpu_id + (dp * a.pp_size + pp) * a.tp_size + tp
                    ep = tp // max(a.tp_size // a.ep_size, 1)
                    title = scheduler_title(k.version, dp, tp, pp, ep, a)
                    specs.append((dp, title, workers.device_files(k.device_globs, gpu),
                                  {"detach": "orphan_workers" in k.faults, "cuda_gib": k.cuda_gib, "gpu": gpu}))
        return specs

    def spawn_children(self):
        ctx = multiprocessing.get_context("spawn")
        a, k = self.args, self.knobs
        detach = "orphan_workers" in k.faults
        pipes = []
        specs = self.scheduler_specs()
        if a.dp_size > 1:
            rx, tx = ctx.Pipe(duplex=False)
            p = ctx.Process(target=workers.run_dp_controller, name="data_parallel_controller",
                            args=("sglang::data_parallel_controller", [s[1:] for s in specs], tx))
            p.start()
            pipes.append(rx)
            self.children.append(p)
        else:
            for dummy, title, devices, kwargs in specs:
                rx, tx = ctx.Pipe(duplex=False)
                p = ctx.Process(target=workers.run, name=title, daemon=False, args=(title, devices),
                                kwargs=dict(kwargs, ready=tx))
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

    def dead_child(self):
        """The first child that ended other than with exit 0 (SubprocessWatchdog's test), or None."""
        if self.stopping:
            return None
        for p in self.children:
            if p.exitcode is not None and p.exitcode != 0:
                return p
        return None

    def kill_tree(self, sig=signal.SIGKILL):
        self.stopping = True
        for p in self.children:
            for pid in _descendants(p.pid) + [p.pid]:
                try:
                    os.kill(pid, sig)
                except ProcessLookupError:
                    pass

    def die(self, code):
        self.kill_tree()
        os._exit(code)  # no multiprocessing atexit join: the real server does not wait either

    def die_by_sigkill(self):
        """kill_process_tree(os.getpid()): the children, then SIGKILL of itself (a signal exit)."""
        self.kill_tree()
        os.kill(os.getpid(), signal.SIGKILL)

    def child_lost(self, child, loading):
        """A child ended: what the emulated version does about it (called when the version would notice)."""
        if self.knobs.at_least("0.5.15"):
            if loading:
                log("RuntimeError: Rank 0 scheduler died during initialization (exit code: %s). If exit code is -9 "
                    "(SIGKILL), a common cause is the OS OOM killer." % child.exitcode)
            else:
                log("Subprocess %s (pid=%d) crashed with exit code %s. Triggering SIGQUIT for cleanup..."
                    % (child.name, child.pid, child.exitcode))
                log("SIGQUIT received. It usually means one child failed.")
            self.record("child_lost")
            self.die_by_sigkill()
        # 0.5.5/0.5.9 have no liveness watch: nothing notices
        if not self.scheduler_lost:
            self.scheduler_lost = True
            self.record("child_lost")

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

    def on_sigint(self, signum, frame):  # pylint: disable=unused-argument
        """uvicorn stops on SIGINT, then launch_server's `finally: kill_process_tree(os.getpid(),
        include_parent=False)` SIGKILLs the children; while loading the KeyboardInterrupt ends the process."""
        self.record("sigint")
        if self.phase == "loading":
            self.kill_tree()
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGINT)
            return
        log("Shutting down")
        log("Finished server process [%d]" % os.getpid())
        self.kill_tree()
        self.record("stopped")
        os._exit(0)

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
        if not self.knobs.at_least("0.5.15"):
            self.die_by_sigkill()
        # 0.5.15 (sglang/srt/managers/tokenizer_manager.py line 2684-2689): ShutdownReq to the schedulers,
        # `deadline = time.monotonic() + 15` while they run, then kill_process_tree(include_parent=True);
        # 0.5.23 asks, waits, and exits 0.
        log("Shutting down schedulers.")
        self.stopping = True
        for p in self.children:
            try:
                os.kill(p.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and any(p.exitcode is None for p in self.children):
            time.sleep(0.1)
        if self.knobs.at_least("0.5.23"):
            self.kill_tree()
            os._exit(0)
        self.die_by_sigkill()

    # --- life ----------------------------------------------------------------------------
    def read_model(self):
        """SGLANG_DOUBLE_READ_MODEL=1: read every file under --model-path, as weight loading does."""
        total = 0
        for top, dummy, files in os.walk(self.args.model_path):
            for name in sorted(files):
                with open(os.path.join(top, name), "rb") as f:
                    while True:
                        chunk = f.read(READ_CHUNK)
                        if not chunk:
                            break
                        total += len(chunk)
        log("Load weight end. read %d bytes from %s" % (total, self.args.model_path))

    def load(self):
        """Loading: the port stays closed until the schedulers are ready and the load time has passed."""
        k = self.knobs
        pending = self.spawn_children()
        t0 = time.monotonic()
        deadline = t0 + k.load_seconds
        crash_at = t0 + k.load_seconds / 2
        if k.read_model:
            self.read_model()
        next_check = t0 + k.load_poll_seconds
        while time.monotonic() < deadline or pending:
            pending = [rx for rx in pending if not rx.poll()]
            now = time.monotonic()
            if "crash_during_load" in k.faults and now >= crash_at:
                log("Scheduler hit an exception: RuntimeError: CUDA error: an illegal memory access was encountered")
                self.record("crashed")
                self.die(1)
            dead = self.dead_child()
            if dead is not None:
                if not k.at_least("0.5.15"):
                    self.child_lost(dead, loading=True)
                    while True:  # blocked in recv() for ever, port closed
                        time.sleep(3600)
                if now >= next_check:
                    self.child_lost(dead, loading=True)
            if now >= next_check:
                next_check = now + k.load_poll_seconds
            time.sleep(0.05)

    def run(self):
        a, k = self.args, self.knobs
        signal.signal(signal.SIGTERM, self.on_sigterm)
        signal.signal(signal.SIGINT, self.on_sigint)
        shown = {key: ("<redacted>" if key == "api_key" and v else v) for key, v in vars(a).items()
                 if v not in (None, False) or key in ("tp_size", "dp_size")}
        log("server_args=%s" % shown)
        self.record("loading")
        self.load()
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
        self.httpd = httpd
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
            dead = self.dead_child()
            if dead is not None:
                self.child_lost(dead, loading=False)
            time.sleep(k.liveness_seconds if k.at_least("0.5.15") else 0.5)


def _descendants(pid):
    """The pids below pid (the DP controller's schedulers), from /proc."""
    kids = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open("/proc/%s/stat" % d) as f:
                    stat = f.read()
            except OSError:
                continue
            kids.setdefault(int(stat[stat.rindex(")") + 2:].split()[1]), []).append(int(d))
    out, todo = [], [pid]
    while todo:
        for c in kids.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
    return out


def run_server(server_args):
    """What sglang.launch_server.run_server does for the HTTP server: runs until the server ends."""
    Server(server_args, Knobs()).run()
    return 0
