"""The main process of `python -m sglang.launch_server` / `sglang serve`, as ../shared/reference/sglang-behaviour.md
describes the real one and tests/conformance/real/ records it.

Phases: loading (port closed) -> warm-up (/model_info and /v1/models 200, /health 503) -> ready. The warm-up is the
real one's thread, started before uvicorn binds: it polls the server's own /model_info (a try a second), sends one
/generate, then the server is ready; after as many tries as the real 120 it gives up and SIGKILLs the tree and
itself. A failed bind: uvicorn's shutdown waits for that thread (SIGTERM meanwhile only noted), then exit 3; its
warm-up talks to whatever holds the port. SIGTERM while loading: death at once. SIGTERM before the first generate
(SGLang installs its handler then): uvicorn closes the port (no 503), waits for the warm-up thread, then dies of the
SIGTERM. Once a generate ran: /health 503, a drain checked every 5 s (skipped once a health check failed), then
0.5.5/0.5.9 SIGKILL their tree and themselves, 0.5.15 asks the schedulers to stop, waits up to 15 s for them, then
SIGKILLs the tree and itself, 0.5.23 asks, waits and exits 0. SIGINT: uvicorn stops, the children are SIGKILLed,
exit 0 (while loading the KeyboardInterrupt ends the process). A child killed by a signal: 0.5.5/0.5.9 never notice
(loading blocks for ever; once serving /health turns 503 and nothing exits); 0.5.15+ notice it: while loading
exit 1, once serving SIGKILL of the tree and themselves.
"""
import json
import multiprocessing
import os
import pickle
import signal
import socket
import sys
import threading
import time
from datetime import datetime
from http.server import ThreadingHTTPServer
from urllib import error as urlerror
from urllib import request as urlrequest

from sglang._double import nodes, shm, workers
from sglang._double.config import Knobs
from sglang._double.http import DummyHealthHandler, Handler

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


# the KV pool configurator's message when no token fits (kv_pool)
NOT_ENOUGH_MEMORY = "Not enough memory. Please try to increase --mem-fraction-static."


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
        self.handlers = False  # SGLang's SIGTERM handler, installed at the first generate request
        self.sigterm_seen = False
        self.wakeup_r = None
        self.unhealthy = False  # a health check failed (ServerStatus.UnHealthy)
        self.crashing = False  # the SIGQUIT handler's sleep: nothing answers
        self.bind_failed = False
        self.uvicorn_exit = False  # uvicorn took a SIGTERM (before SGLang's handler, or after a failed bind)
        self.warm = None
        self.bound = threading.Event()  # the bind was tried (uvicorn binds right after the lifespan's startup)
        self.httpd = None
        self.served_model_name = args.served_model_name or args.model_path
        # --nnodes > 1: this node's rank in the group (sglang/_double/nodes.py); --dist-timeout, else torch's default
        self.group = nodes.Group(args, args.dist_timeout or knobs.dist_timeout_seconds) if args.nnodes > 1 else None
        self.follower = args.node_rank >= 1
        # the schedulers' request pipes (workers.serve_steps): every output of the server needs each of them (a
        # TP group runs each batch on every rank); the time of the last one is the tokenizer manager's
        # last_receive_tstamp, which /health_generate waits on
        self.engines = []
        self.engine_lock = threading.Lock()
        self.last_receive = 0.0
        # PortArgs.init_new's instance id (0.5.15+), which names the load snapshot file (sglang/_double/shm.py)
        self.instance_id = shm.new_instance_id() if knobs.at_least("0.5.15") else None
        self.tokenizer_args = None  # multi_tokenizer_args_<pid> (--tokenizer-worker-num > 1)
        self.scheduler_procs = []

    # --- records -------------------------------------------------------------------------
    def record(self, event):
        if self.knobs.state_file:
            with open(self.knobs.state_file, "a", encoding="utf-8") as f:
                f.write(json.dumps({"event": event, "time": time.time(), "pid": os.getpid()}) + "\n")

    # --- processes -----------------------------------------------------------------------
    def scheduler_specs(self):
        """[(dp_rank, title, devices, kwargs)] of this node's schedulers, in the real launch order. With --nnodes a
        node runs the TP and PP ranks of its share, on its own GPUs from --base-gpu-id (0.5.5 entrypoints/engine.py:
        795-814, 0.5.9 engine.py:931-950, 0.5.15 engine.py:1424-1434, 0.5.23 engine.py:2069-2079: `tp_rank_range =
        range(tp_size_per_node * (node_rank % nnodes_per_tp_group), ...)`)."""
        a, k = self.args, self.knobs
        per_tp_group = max(a.nnodes // a.pp_size, 1)
        tp_per_node = a.tp_size // per_tp_group
        pp_per_node = max(a.pp_size // a.nnodes, 1)
        tp_ranks = range(tp_per_node * (a.node_rank % per_tp_group), tp_per_node * (a.node_rank % per_tp_group + 1))
        pp_ranks = range(pp_per_node * (a.node_rank // per_tp_group), pp_per_node * (a.node_rank // per_tp_group + 1))
        specs = []
        for dp in range(a.dp_size):
            for pp in pp_ranks:
                for tp in tp_ranks:
                    local = (pp % pp_per_node) * tp_per_node + tp % tp_per_node
                    gpu = a.base_gpu_id + (dp * pp_per_node * tp_per_node) + local
                    ep = tp // max(a.tp_size // a.ep_size, 1)
                    title = scheduler_title(k.version, dp, tp, pp, ep, a)
                    segments = {"version": k.version, "tp_rank": tp, "tp_size": a.tp_size, "pp_rank": pp,
                                "dp_size": a.dp_size, "instance_id": self.instance_id, "state_file": k.state_file}
                    specs.append((dp, title, workers.device_files(k.device_globs, gpu),
                                  {"detach": "orphan_workers" in k.faults, "cuda_gib": k.cuda_gib, "gpu": gpu,
                                   "segments": segments}))
        return specs

    def spawn_children(self):
        ctx = multiprocessing.get_context("spawn")
        a, k = self.args, self.knobs
        detach = "orphan_workers" in k.faults
        pipes = []
        specs = self.scheduler_specs()
        self.scheduler_procs = []  # the process that holds each spec's scheduler (the controller with --dp > 1)
        if a.dp_size > 1:
            rx, tx = ctx.Pipe(duplex=False)
            p = ctx.Process(target=workers.run_dp_controller, name="data_parallel_controller",
                            args=("sglang::data_parallel_controller", [s[1:] for s in specs], tx))
            p.start()
            pipes.append(rx)
            self.children.append(p)
            self.scheduler_procs = [p] * len(specs)
        else:
            for dummy, title, devices, kwargs in specs:
                rx, tx = ctx.Pipe(duplex=False)
                if not self.follower:
                    ours, theirs = ctx.Pipe(duplex=True)
                    self.engines.append(ours)
                    kwargs = dict(kwargs, engine=theirs)
                p = ctx.Process(target=workers.run, name=title, daemon=False, args=(title, devices),
                                kwargs=dict(kwargs, ready=tx))
                p.start()
                pipes.append(rx)
                self.scheduler_procs.append(p)
                (self.leftovers if detach else self.children).append(p)
        if not self.follower:  # a rank >= 1 node runs no detokenizer and no tokenizer (engine.py, `node_rank >= 1`)
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

    def lost_scheduler(self):
        """A child that will never answer again (what a generation waits on), before the server ends its own."""
        return not self.stopping and any(doomed(p.pid) for p in self.children)

    def kill_tree(self, sig=signal.SIGKILL):
        """kill_process_tree: every descendant (psutil's children(recursive=True)), multiprocessing's resource tracker
        too, so that the shared memory it would unlink once the tree is gone stays (sglang/_double/shm.py)."""
        self.stopping = True
        for p in self.children:
            for pid in _descendants(p.pid) + [p.pid]:
                try:
                    os.kill(pid, sig)
                except ProcessLookupError:
                    pass
        for pid in _descendants(os.getpid()):
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass

    def shutdown_req(self):
        """The ShutdownReq to the children (workers.SHUTDOWN_REQ): they release and exit 0."""
        for p in self.children:
            try:
                os.kill(p.pid, workers.SHUTDOWN_REQ)
            except ProcessLookupError:
                pass

    def uvicorn_returned(self):
        """The `finally` after uvicorn.run returns (or raises SystemExit): multi_tokenizer_args unlinked (0.5.5
        entrypoints/http_server.py:1428, 0.5.9 :1998, 0.5.15 :2474, 0.5.23 :3081), before launch_server's own finally
        kills the children."""
        if self.tokenizer_args is not None:
            self.tokenizer_args.unlink()

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
                # _wait_for_scheduler_ready raises RuntimeError: the uncaught exception exits 1, after
                # launch_server's `finally: kill_process_tree(os.getpid(), include_parent=False)`
                log("RuntimeError: Rank 0 scheduler died during initialization (exit code: %s). If exit code is -9 "
                    "(SIGKILL), a common cause is the OS OOM killer." % child.exitcode)
                self.record("child_lost")
                self.die(1)
            else:
                log("Subprocess %s (pid=%d) crashed with exit code %s. Triggering SIGQUIT for cleanup..."
                    % (child.name, child.pid, child.exitcode))
                log("SIGQUIT received. signum=None, frame=None. It usually means one child failed.")
                log("Sleeping 5 seconds before crash diagnostics to let GPU activity settle.")
                self.crashing = True
                self.record("child_lost")
                time.sleep(self.knobs.crash_sleep_seconds)
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
        self.sigterm_arrived()
        if self.bind_failed or not self.handlers:
            # uvicorn's own handler: its exit flag only (tokenizer_manager.py auto_create_handle_loop installs
            # SGLang's at the first generate request)
            self.uvicorn_exit = True
            return
        log("SIGTERM received. signum=%d frame=None. Draining requests and shutting down..." % signum)
        self.draining = True

    def on_sigint(self, signum, frame):  # pylint: disable=unused-argument
        """uvicorn stops on SIGINT, then launch_server's `finally: kill_process_tree(os.getpid(),
        include_parent=False)` SIGKILLs the children; while loading the KeyboardInterrupt ends the process."""
        self.record("sigint")
        if self.phase == "loading" or self.follower:
            self.kill_tree()
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGINT)
            return
        log("Shutting down")
        log("Finished server process [%d]" % os.getpid())
        self.uvicorn_returned()
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
            if self.unhealthy:
                log("Signal SIGTERM received while health check failed. Force exiting.")
                break
            log("Gracefully exiting... Remaining number of requests %d." % remaining)
            if not remaining:
                break
            time.sleep(self.knobs.watchdog_seconds)
        self.record("stopped")
        if not self.knobs.at_least("0.5.15"):
            self.die_by_sigkill()
        # 0.5.15 (sglang/srt/managers/tokenizer_manager.py line 2684-2689): ShutdownReq to the schedulers,
        # `deadline = time.monotonic() + 15` while they run, then kill_process_tree(include_parent=True);
        # 0.5.23 asks, waits, and exits 0.
        log("Shutting down schedulers.")
        self.stopping = True
        if self.group is not None:  # the ShutdownReq reaches every TP rank, the other nodes' too
            self.record("shutdown_broadcast")
            self.group.broadcast_shutdown()
        self.shutdown_req()
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and any(p.exitcode is None for p in self.children):
            time.sleep(0.1)
        if self.knobs.at_least("0.5.23"):
            # kill_process_tree(include_parent=False), then the server's stop hook: uvicorn.run returns
            self.kill_tree()
            self.uvicorn_returned()
            os._exit(0)
        self.die_by_sigkill()

    # --- life ----------------------------------------------------------------------------
    def read_model(self):
        """SGLANG_DOUBLE_READ_MODEL=1: read every file under --model-path, as weight loading does; the seconds it took
        (part of the weight load's elapsed time)."""
        tic = time.monotonic()
        total = 0
        for top, dummy, files in os.walk(self.args.model_path):
            for name in sorted(files):
                with open(os.path.join(top, name), "rb") as f:
                    while True:
                        chunk = f.read(READ_CHUNK)
                        if not chunk:
                            break
                        total += len(chunk)
        log("Loading weights: read %d bytes from %s" % (total, self.args.model_path))  # the double's own line
        self.record("read_model")
        return time.monotonic() - tic

    def load(self):
        """Loading: the port stays closed until the schedulers are ready and the load time has passed."""
        k = self.knobs
        pending = self.spawn_children()
        if self.group is not None:
            self.form_group()
        t0 = time.monotonic()
        deadline = t0 + k.load_seconds
        crash_at = t0 + k.load_seconds / 2
        cache_mode = getattr(self.args, "weight_cache_mode", None) or "off"
        read_seconds = self.read_model() if k.read_model and cache_mode == "off" else 0.0
        next_check = t0 + k.load_poll_seconds
        while time.monotonic() < deadline or pending:
            pending = [rx for rx in pending if not _reported_ready(rx)]
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
        self.load_weights(read_seconds)
        self.kv_pool()
        if self.group is not None:
            self.group.loaded()

    def kv_pool(self):
        """The KV pool, sized once the weights are loaded: the profiled capacity capped by --max-total-tokens; a pool
        of no tokens is the scheduler's RuntimeError, raised after the weights' load (0.5.5 model_executor/
        model_runner.py:1598-1630, 0.5.9 model_runner_kv_cache_mixin.py:378-419, 0.5.15 model_runner_kv_cache_mixin.py:
        1202-1211 and pool_configurator.py:61-66, 0.5.17 mem_cache/kv_cache_configurator.py:1696-1707 and
        model_executor/pool_configurator.py:62-67, 0.5.23 mem_cache/kv_cache_configurator.py:3096 and
        model_executor/pool_configurator.py:94-99)."""
        cap = getattr(self.args, "max_total_tokens", None)
        if cap is not None and cap <= 0:
            log("Scheduler hit an exception: Traceback (most recent call last):\n  File \"sglang/srt/managers/"
                "scheduler.py\", in run_scheduler_process\nRuntimeError: %s" % NOT_ENOUGH_MEMORY)
            self.record("kv_pool_failed")
            self.scheduler_raised()

    # --- the weights ---------------------------------------------------------------------
    def load_weights(self, read_seconds):
        """ModelRunner.load_model of each local rank once the start-up is done: from the disk (SGLANG_DOUBLE_WEIGHT_LOAD_
        SECONDS, plus SGLANG_DOUBLE_READ_MODEL's read), or with --weight-cache-mode client (0.5.17 on) from the
        weight cache daemon of the rank (sglang/srt/weight_cache/ipc_loader.py), the disk only when its socket file is
        missing. A failure is the scheduler's exception. Each rank ends with the version's "Load weight end." line
        (0.5.5 model_executor/model_runner.py:799-804, 0.5.9 :1041-1047, 0.5.15 :1585-1591, 0.5.17 :1099-1106, 0.5.23
        :1373-1379)."""
        a, k = self.args, self.knobs
        mode = getattr(a, "weight_cache_mode", None) or "off"
        specs = self.scheduler_specs()
        disk_done = False
        for i, (dummy, title, dummy2, kwargs) in enumerate(specs):
            prefix = title[len("sglang::scheduler"):].replace("_", " ")

            def rank_log(msg, prefix=prefix):
                sys.stdout.write("[%s%s] %s\n" % (datetime.now().strftime("%Y-%m-%d %H:%M:%S"), prefix, msg))
                sys.stdout.flush()

            seg = kwargs["segments"]
            tic = time.perf_counter()
            result = None
            if mode == "client":
                from sglang.srt.weight_cache import ipc_loader  # pylint: disable=import-outside-toplevel

                try:
                    result = ipc_loader.fetch(a, seg["tp_rank"], seg["pp_rank"], kwargs["gpu"], rank_log)
                except ipc_loader.LoadError as e:
                    rank_log("Scheduler hit an exception: Traceback (most recent call last):\n  File "
                             "\"sglang/srt/weight_cache/ipc_loader.py\", in load_model\n%s: %s" % (e.cls_name, e))
                    self.record("weight_cache_failed")
                    self.scheduler_raised()
                if result is None:
                    rank_log("[IpcModelLoader] Weight cache not available or config mismatch, falling back to disk load")
                else:
                    ipc_loader.mapped(result, tic, mode, rank_log)
                    self.record("weight_cache_mapped")
                    self.watch_daemon(result["pid"], i)
            if result is None:
                if not disk_done:  # the ranks read at once
                    if mode == "client" and k.read_model:
                        read_seconds = self.read_model()
                    time.sleep(k.weight_load_seconds)
                    disk_done = True
                elapsed = time.perf_counter() - tic + read_seconds
            else:
                elapsed = time.perf_counter() - tic
            rank_log(self.load_weight_end(elapsed))

    def load_weight_end(self, elapsed):
        try:  # config.json's architecture (the package sglang.srt.weight_cache exists only from 0.5.17)
            with open(os.path.join(self.args.model_path, "config.json"), encoding="utf-8") as f:
                archs = json.load(f).get("architectures") or ["LlamaForCausalLM"]
        except (OSError, ValueError, AttributeError):
            archs = ["LlamaForCausalLM"]
        line = "Load weight end. "
        if self.knobs.at_least("0.5.9"):
            line += "elapsed=%.2f s, " % elapsed
        line += "type=%s, " % archs[0]
        if not self.knobs.at_least("0.5.15"):
            line += "dtype=torch.bfloat16, "
        return line + "avail mem=62.31 GB, mem usage=15.12 GB."

    def watch_daemon(self, pid, index):
        """The client's daemon-liveness watchdog (0.5.17 weight_cache/ipc_loader.py:162-207): every 5 s a look at the
        daemon's pid; once it is gone, the critical log and SIGKILL of the scheduler holding the mapping (the engine
        then ends as for any scheduler killed, child_lost)."""
        from sglang.srt.weight_cache import ipc_loader  # pylint: disable=import-outside-toplevel

        target = self.scheduler_procs[index]

        def watch():
            while True:
                time.sleep(self.knobs.weight_cache_poll_seconds)
                if not ipc_loader.daemon_alive(pid):
                    log(ipc_loader.daemon_died_message(pid))
                    self.record("weight_cache_daemon_died")
                    try:
                        os.kill(target.pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
                    return

        threading.Thread(target=watch, name="weight-cache-daemon-watchdog", daemon=True).start()

    # --- several nodes -------------------------------------------------------------------
    def form_group(self):
        """The rendezvous at --dist-init-addr (nodes.Group.join); timing out is a scheduler raising."""
        self.record("rendezvous")
        try:
            self.group.join(log)
        except nodes.RendezvousTimeout as e:
            log("Scheduler hit an exception: torch.distributed.DistStoreError: %s" % e)
            self.record("rendezvous_timeout")
            self.scheduler_raised()
        except OSError as e:  # the store's port taken on rank 0: DistNetworkError, raised the same way
            log("Scheduler hit an exception: torch.distributed.DistNetworkError: %s" % e)
            self.record("rendezvous_failed")
            self.scheduler_raised()
        self.record("group_formed")
        self.group.watch(self.shutdown_received, self.peer_lost)

    def scheduler_raised(self):
        """A scheduler's exception: SIGQUIT to this process. The launch-phase handler (while loading, and for good on
        a rank >= 1, which has no tokenizer manager to replace it) SIGKILLs the tree and itself; once rank 0 serves,
        the tokenizer manager's running_phase_sigquit_handler does the same (0.5.5 managers/tokenizer_manager.py:
        2340-2345, 0.5.9 :2506-2511, 0.5.15 :3127-3136, 0.5.23 :4072-4081), after the crash sleep on 0.5.15+."""
        log("Received sigquit from a child process. It usually means the child failed.")
        if self.phase == "ready" and self.knobs.at_least("0.5.15"):
            self.crashing = True
            time.sleep(self.knobs.crash_sleep_seconds)
        self.die_by_sigkill()

    def peer_lost(self):
        """Another node's processes ended without the broadcast: this node's schedulers fail their next collective
        (gloo: connection closed by peer) and raise."""
        if self.stopping:
            return
        log("Scheduler hit an exception: RuntimeError: [gloo] Connection closed by peer")
        self.record("peer_lost")
        self.scheduler_raised()

    def shutdown_received(self):
        """Rank >= 1: the ShutdownReq broadcast (0.5.15+ send it: 0.5.15 managers/tokenizer_manager.py:2684, 0.5.23
        :3547) ends this node's schedulers' event loop; they release and exit, and the main process goes on: 0.5.23
        returns (entrypoints/http_server.py:3163, `if get_parallel().node_rank >= 1: return`), launch_server.py's
        finally kills what is left, exit 0. Earlier versions have no such return: launch_server goes on to the API
        server's lifespan, which fails on the missing tokenizer manager (0.5.15 http_server.py:296,
        `_global_state.tokenizer_manager.serving_chat_class`), and uvicorn exits with STARTUP_FAILURE, 3."""
        self.record("shutdown_received")
        self.stopping = True
        self.shutdown_req()
        for p in self.children:
            p.join()
        log("Scheduler or DataParallelController terminated with 0")
        self.record("stopped")
        if self.knobs.at_least("0.5.23"):
            os._exit(0)
        log("Application startup failed. Exiting.")
        os._exit(3)

    def follow(self):
        """A rank >= 1 once its schedulers are ready: the dummy health server on --port, then a wait on the
        schedulers for as long as they live (0.5.5 entrypoints/engine.py:849-869, 0.5.9 engine.py:1040-1060, 0.5.15
        engine.py:835-856, 0.5.23 engine.py:1234-1290). SIGTERM: no handler before 0.5.23 (the tokenizer manager,
        which installs SGLang's, does not run here), so it kills the process, its schedulers following by
        PR_SET_PDEATHSIG; 0.5.23 installs one once the schedulers are ready that only logs (engine.py:1259-1273)."""
        if self.knobs.at_least("0.5.23"):
            signal.signal(signal.SIGTERM, self.on_follower_sigterm)
        else:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
        self.phase = "ready"
        self.record("ready")
        try:
            httpd = make_httpd(self.args.host, self.args.port, DummyHealthHandler)
        except OSError as e:  # the health thread's error; the main process keeps waiting on its schedulers
            log("Dummy health check server failed to start: [Errno %s] %s" % (e.errno, e.strerror))
            self.record("bind_failed")
        else:
            httpd.daemon_threads = True
            httpd.server = self
            self.httpd = httpd
            threading.Thread(target=httpd.serve_forever, daemon=True).start()
            log("Dummy health check server started in background thread at %s:%d" % (self.args.host, self.args.port))
        while True:  # blocked on the schedulers' end (a peer's end, the broadcast: the group's threads)
            time.sleep(3600)

    def on_follower_sigterm(self, signum, frame):  # pylint: disable=unused-argument
        self.record("sigterm")
        log("SIGTERM received on node_rank %d; waiting for the rank-0 ShutdownReq broadcast to stop the schedulers."
            % self.args.node_rank)

    def is_draining(self):
        """Draining, or about to be: a SIGTERM has arrived (the wakeup fd says so at once) that SGLang's handler, once
        the main thread runs it, turns into a drain. A request thread must not answer as if it had not arrived: the real
        handler runs in the event loop that serves the requests, before any later request is read."""
        if self.draining:
            return True
        if "ignore_sigterm" in self.knobs.faults or self.phase == "loading" or self.bind_failed or not self.handlers:
            return False
        return self.sigterm_arrived()

    def sigterm_arrived(self):
        """Whether a SIGTERM reached the process (read from the wakeup fd, written when it arrives, before its Python
        handler runs in the main thread)."""
        with self.lock:
            try:
                while True:
                    got = os.read(self.wakeup_r, 64)
                    if not got:
                        break
                    self.sigterm_seen = self.sigterm_seen or signal.SIGTERM in got
            except BlockingIOError:
                pass
            return self.sigterm_seen

    def step(self, prefill=0.0):
        """One output of the schedulers (a prefill of so many seconds, or a token), waited for: none while one of them
        is busy or stopped; never, once one is gone. Without request pipes (--dp > 1, rank >= 1) only the time
        passes."""
        if not self.engines:
            time.sleep(prefill)
        else:
            with self.engine_lock:
                try:
                    for engine in self.engines:
                        engine.send(prefill)
                    for engine in self.engines:
                        engine.recv()
                except (EOFError, OSError):
                    while True:  # nothing will ever answer this request
                        time.sleep(3600)
        self.last_receive = time.time()

    def first_generate(self):
        """A generate request: SGLang installs its SIGTERM handler then, unless uvicorn's already took a SIGTERM."""
        if not self.handlers and not self.sigterm_arrived():
            self.handlers = True

    def run(self):
        a, k = self.args, self.knobs
        self.wakeup_r, w = os.pipe()
        os.set_blocking(self.wakeup_r, False)
        os.set_blocking(w, False)
        signal.set_wakeup_fd(w)
        signal.signal(signal.SIGTERM, self.on_sigterm)
        signal.signal(signal.SIGINT, self.on_sigint)
        shown = {key: ("<redacted>" if key == "api_key" and v else v) for key, v in vars(a).items()
                 if v not in (None, False) or key in ("tp_size", "dp_size")}
        log("server_args=%s" % shown)
        self.record("loading")
        self.load()
        if self.follower:
            return self.follow()
        if a.tokenizer_worker_num > 1:  # write_data_for_multi_tokenizer, before uvicorn.run (sglang/_double/shm.py)
            self.tokenizer_args = shm.TokenizerArgs(pickle.dumps((None, vars(a), {})), k.state_file)
        # the lifespan's startup: the warm-up thread starts before uvicorn binds the port
        self.phase = "warmup"
        self.record("warmup")
        self.warm = threading.Thread(target=self.warmup, daemon=True)
        self.warm.start()
        try:
            httpd = make_httpd(a.host, a.port)
        except OSError as e:
            log("[Errno %s] error while attempting to bind on address ('%s', %d): %s"
                % (e.errno, a.host, a.port, (e.strerror or str(e)).lower()))
            self.record("bind_failed")
            self.bind_failed = True
            self.bound.set()
            self.startup_failed()
        httpd.daemon_threads = True
        httpd.server = self
        self.httpd = httpd
        self.bound.set()
        log("Uvicorn running on http://%s:%d (Press CTRL+C to quit)" % (a.host, a.port))
        threading.Thread(target=httpd.serve_forever, daemon=True).start()
        threading.Thread(target=self.watchdog, daemon=True).start()
        while True:
            if self.uvicorn_exit:
                self.uvicorn_shutdown()
            dead = self.dead_child()
            if dead is not None:
                self.child_lost(dead, loading=False)
            time.sleep(min(k.liveness_seconds, 0.1) if k.at_least("0.5.15") else 0.1)

    def warmup(self):
        """_wait_and_warmup: with --skip-server-warmup the server is up at once; else the real thread's tries at the
        server's own /model_info (/get_model_info on 0.5.5), then one /generate (the first generate request)."""
        a, k = self.args, self.knobs
        if a.skip_server_warmup:
            return self.become_ready()
        host = {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}.get(a.host, a.host)
        url = "http://%s:%d" % ("[%s]" % host if ":" in host else host, a.port)
        headers = {"Authorization": "Bearer " + a.api_key} if a.api_key else {}
        info = "/get_model_info" if k.version == "0.5.5" else "/model_info"
        self.bound.wait()
        time.sleep(k.warmup_seconds)
        for i in range(k.warmup_tries):
            if i:
                time.sleep(k.warmup_retry_seconds)
            if _status(url + info, headers) == 200:
                break
        else:
            log("Initialization failed. warmup error: %s%s answered no 200 in %d tries" % (url, info, k.warmup_tries))
            self.record("warmup_failed")
            return self.die_by_sigkill()
        if "never_healthy" in k.faults:
            return None  # the warm-up generate never returns
        body = {"text": "The capital city of France is", "sampling_params": {"temperature": 0, "max_new_tokens": 8}}
        if _status(url + "/generate", headers, body) != 200:
            log("Initialization failed. warmup error: the warm-up generate failed")
            self.record("warmup_failed")
            return self.die_by_sigkill()
        return self.become_ready()

    def become_ready(self):
        log("The server is fired up and ready to roll!")
        if self.bind_failed:
            return  # its warm-up was answered by whatever holds the port
        self.phase = "ready"
        self.record("ready")

    def startup_failed(self):
        """After a failed bind uvicorn runs the app's shutdown, which joins the warm-up thread, then exits with
        STARTUP_FAILURE (3); a SIGTERM taken meanwhile is raised again when uvicorn stops capturing signals."""
        self.warm.join()
        if self.uvicorn_exit:
            self.die_by_sigterm()  # raised inside uvicorn.run: no finally
        self.uvicorn_returned()  # uvicorn's sys.exit(3) goes through the finally
        self.die(3)  # launch_server's finally: kill_process_tree(os.getpid(), include_parent=False)

    def uvicorn_shutdown(self):
        """A SIGTERM before the first generate: uvicorn closes the port, its shutdown joins the warm-up thread,
        then the captured SIGTERM is raised again: death by SIGTERM (the children follow by PR_SET_PDEATHSIG)."""
        self.httpd.shutdown()
        self.httpd.server_close()
        self.record("port_closed")
        self.warm.join()
        self.die_by_sigterm()

    def die_by_sigterm(self):
        self.record("stopped")
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(60)


class _HTTPServer6(ThreadingHTTPServer):
    address_family = socket.AF_INET6

    def server_bind(self):
        # asyncio's create_server (uvicorn's) sets IPV6_V6ONLY: `--host ::` listens on IPv6 only (seen on 0.5.15)
        self.socket.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        super().server_bind()


def make_httpd(host, port, handler=Handler):
    """The listening server: IPv6 only for an IPv6 host (`::`: every IPv6 address, no IPv4), as uvicorn binds."""
    return (_HTTPServer6 if ":" in host else ThreadingHTTPServer)((host, port), handler)


def _reported_ready(rx):
    """A child's pipe said ready; the end of file of a dead one's is no ready (the real parent waits on)."""
    if not rx.poll():
        return False
    try:
        rx.recv()
    except EOFError:
        rx.poll = lambda: False  # never ready: the liveness poll finds the dead child
        return False
    return True


def doomed(pid):
    """Gone, a zombie, or with a SIGKILL pending: a process that will never answer again."""
    try:
        with open("/proc/%d/status" % pid) as f:
            status = dict(line.split(":", 1) for line in f.read().splitlines() if ":" in line)
    except OSError:
        return True
    if status.get("State", "").strip()[:1] in ("Z", "X"):
        return True
    return any(int(status.get(k, "0").strip() or "0", 16) & (1 << (signal.SIGKILL - 1)) for k in ("SigPnd", "ShdPnd"))


def _status(url, headers, body=None):
    data = None if body is None else json.dumps(body).encode()
    req = urlrequest.Request(url, data=data, headers=dict(headers, **({"Content-Type": "application/json"} if data else {})))
    try:
        with urlrequest.urlopen(req, timeout=5) as r:
            return r.status
    except urlerror.HTTPError as e:
        return e.code
    except (urlerror.URLError, OSError):
        return 0


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
