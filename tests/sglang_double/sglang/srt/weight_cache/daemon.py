"""`python -m sglang.srt.weight_cache.daemon` (0.5.17 on): the weight cache daemon, as the wheels' daemon.py has it,
without a GPU (README.md, "The weight cache daemon").

Without --gpu-id/--tp-rank it is a launcher: it removes the stale files of this node's ranks (refusing a live one
unless --force), starts one rank daemon per local rank (0.5.17: `python -m sglang.srt.weight_cache.daemon ... --gpu-id
G --tp-rank R` by subprocess.Popen; 0.5.23: a multiprocessing spawn child), waits for every ready file (checked every
2 s), then watches them: the first that exits makes it terminate the others and exit 1. A rank daemon dies with its
parent (PR_SET_PDEATHSIG=SIGKILL), refuses expandable_segments:True, checks the quantization allowlist, "loads"
(SGLANG_DOUBLE_LOAD_SECONDS of start-up, then SGLANG_DOUBLE_WEIGHT_LOAD_SECONDS of reading), binds its socket, writes
its ready file, and serves CacheConfig-checked "tensors" until SIGTERM/SIGINT (then it removes both files). A SIGKILL,
or a SIGTERM to the whole group (the launcher dies of it, the rank daemon is SIGKILLed before its handler's loop
ends), leaves both files behind (day2.md, the live 0.5.17 server).
"""

# The log lines are the wheel's, written as its f-strings write them (tests/conformance compares them), and its
# throwaway names (`conn, _ = sock.accept()`) are kept as it names them.
# pylint: disable=logging-fstring-interpolation,logging-not-lazy,disallowed-name
import argparse
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import time

from sglang._double import workers
from sglang._double.config import Knobs, at_least, emulated_version
from sglang.srt.weight_cache import protocol as P
from sglang.srt.weight_cache.protocol import (
    check_ipc_quant_support,
    cleanup_stale_daemon_files,
    get_ready_path,
    get_socket_path,
    recv_msg,
    send_msg,
)

logger = logging.getLogger(__name__)

CLIENT_CONNECTION_TIMEOUT = 30.0  # 0.5.17 daemon.py:73


def _v23():
    return at_least(emulated_version(), "0.5.23")


class WeightCacheDaemon:
    def __init__(self, opts, gpu_id, tp_rank, pp_rank):
        self.o = opts
        self.gpu_id = gpu_id
        self.tp_rank = tp_rank
        self.pp_rank = pp_rank
        key = P.daemon_key(opts["tp_size"], pp_rank, tp_rank, gpu_id)  # 0.5.17 daemon.py:117-120, 0.5.23 :181-183
        self.socket_path = get_socket_path(key)
        self.ready_path = get_ready_path(key)
        self.config = None
        self.entries = {}
        self.held = []
        self._running = False

    def load(self):
        knobs = Knobs()
        self._assert_ipc_compatible_allocator()  # 0.5.17 daemon.py:202, before the device is touched
        self.held = workers.device_files(knobs.device_globs, self.gpu_id)  # set_device: this GPU's nodes held open
        self.held = [open(p, "rb") for p in self.held]  # pylint: disable=consider-using-with
        time.sleep(knobs.load_seconds)  # the imports, ServerArgs and ModelConfig (35-53 s on the H200 with the read)
        o = self.o
        self.config, method, quant_config = P.cache_config(
            o["model_path"], o["dtype"], o["quantization"], o["revision"], o["tp_size"], self.tp_rank, o["pp_size"],
            self.pp_rank, o["dp_size"], o["ep_size"])
        # refused before the distributed init and the read (0.5.17 daemon.py:275, 0.5.23 :321)
        check_ipc_quant_support(method, quant_config, where="daemon")
        logger.info(
            f"[WeightCacheDaemon gpu={self.gpu_id} tp_rank={self.tp_rank}] "
            f"Distributed backend initialized (tp_size={o['tp_size']}, "
            f"pp_size={o['pp_size']}, "
            f"world_size={o['tp_size'] * o['pp_size']})"
        )
        logger.info(
            f"[WeightCacheDaemon gpu={self.gpu_id} tp_rank={self.tp_rank}] "
            f"Loading model from disk: {o['model_path']}"
        )
        tic = time.perf_counter()
        if knobs.read_model:
            _read_all(o["model_path"])
        time.sleep(knobs.weight_load_seconds)
        if knobs.cuda_gib:  # real-GPU mode: the weights it keeps
            self.held.append(workers._cuda_allocate(self.gpu_id, knobs.cuda_gib))  # pylint: disable=protected-access
        logger.info(
            f"[WeightCacheDaemon gpu={self.gpu_id} tp_rank={self.tp_rank}] "
            f"Model loaded from disk in {time.perf_counter() - tic:.2f}s"
        )
        n = P.tensor_count(o["model_path"], o["tp_size"])
        self.entries = {"t%d" % i: {"shape": [1], "dtype": self.config["dtype"].replace("torch.", ""),
                                    "is_param": i < n - 1} for i in range(n)}
        logger.info(
            f"[WeightCacheDaemon gpu={self.gpu_id}] "
            f"Exported {n} tensors "
            f"(1 non-persistent buffers), "
            + ("transport=torch_ipc, metadata size ~0.1 MB" if _v23() else "serialized handle size ~0.1 MB")
        )
        logger.info(  # 0.5.17 daemon.py:314-318; 0.5.23 :398-401 drops "Ready to serve."
            f"[WeightCacheDaemon gpu={self.gpu_id} tp_rank={self.tp_rank}] "
            f"Exported {n} tensors as IPC handles." + ("" if _v23() else " Ready to serve.")
        )

    @staticmethod
    def _assert_ipc_compatible_allocator():
        """0.5.17 daemon.py:320-344 (0.5.23 the same)."""
        for var in ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF"):
            conf = os.environ.get(var, "")
            for field in conf.split(","):
                key, _, value = field.partition(":")
                if key.strip() == "expandable_segments" and value.strip().lower() == "true":
                    raise RuntimeError(
                        f"[WeightCacheDaemon] {var} sets expandable_segments:True, "
                        f"which is incompatible with CUDA IPC weight sharing: the "
                        f"expandable-segments allocator hands out memory that cannot "
                        f"be exported via _share_cuda_, so the IPC handle export "
                        f"would fail mid-way. Unset expandable_segments for the "
                        f"weight cache daemon process (it can stay enabled for the "
                        f"engine itself)."
                    )

    def serve(self):
        """0.5.17 daemon.py:404-467: no unlink before bind (a live socket makes bind fail), socket 0600 by umask,
        the ready file `pid=<pid>` and `config=<CacheConfig dict>`, SIGTERM/SIGINT end the 1 s accept loop, and
        only that way are the files removed."""
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        old_umask = os.umask(0o177)
        try:
            sock.bind(self.socket_path)
        finally:
            os.umask(old_umask)
        sock.listen(8)
        sock.settimeout(1.0)
        with open(self.ready_path, "w") as f:
            f.write(f"pid={os.getpid()}\n")
            f.write(f"config={self.config}\n")
        logger.info(f"[WeightCacheDaemon gpu={self.gpu_id}] Listening on {self.socket_path}")
        self._running = True

        def _signal_handler(signum, frame):  # pylint: disable=unused-argument
            logger.info(f"[WeightCacheDaemon gpu={self.gpu_id}] Received signal {signum}, shutting down")
            self._running = False

        signal.signal(signal.SIGTERM, _signal_handler)
        signal.signal(signal.SIGINT, _signal_handler)
        try:
            while self._running:
                try:
                    conn, _ = sock.accept()
                    conn.settimeout(CLIENT_CONNECTION_TIMEOUT)
                    try:
                        self._handle_connection(conn)
                    except Exception as e:  # pylint: disable=broad-except
                        logger.error(f"[WeightCacheDaemon gpu={self.gpu_id}] Error handling connection: {e}")
                    finally:
                        conn.close()
                except socket.timeout:
                    continue
        finally:
            sock.close()
            for path in (self.socket_path, self.ready_path):
                if os.path.exists(path):
                    os.unlink(path)
            logger.info(f"[WeightCacheDaemon gpu={self.gpu_id}] Shutdown complete")

    def _handle_connection(self, conn):
        """0.5.17 daemon.py:469-525."""
        req = recv_msg(conn)
        if req.get("type") == "query_config":
            send_msg(conn, {"status": "ok", "config": self.config})
        elif req.get("type") == "fetch_state":
            engine = req["config"]
            if engine != self.config:
                mismatches = {k: (self.config.get(k), engine.get(k)) for k in self.config
                              if self.config.get(k) != engine.get(k)}
                logger.warning(f"[WeightCacheDaemon gpu={self.gpu_id}] Config mismatch: {mismatches}")
                send_msg(conn, {"status": "mismatch", "daemon_config": self.config})
                return
            logger.info(f"[WeightCacheDaemon gpu={self.gpu_id}] "
                        + (f"Serving {len(self.entries)} tensors via torch_ipc transport" if _v23()
                           else f"Serving {len(self.entries)} IPC handles to engine"))
            answer = {"status": "ok", "config": self.config, "entries": self.entries, "pid": os.getpid()}
            if _v23():
                answer.update(transport_backend="torch_ipc", preloaded_weights_bytes=len(self.entries) << 20)
            send_msg(conn, answer)
        elif req.get("type") == "ping":
            send_msg(conn, {"status": "ok"})
        else:
            send_msg(conn, {"status": "error", "message": f"Unknown request type: {req.get('type')}"})


def _record(event):
    """SGLANG_DOUBLE_STATE_FILE: the double's phase events (its README), here the launcher's."""
    path = os.environ.get("SGLANG_DOUBLE_STATE_FILE")
    if path:
        with open(path, "a", encoding="utf-8") as f:
            f.write(json.dumps({"event": event, "time": time.time(), "pid": os.getpid()}) + "\n")


def _read_all(path):
    for top, dummy, files in os.walk(path):
        for name in sorted(files):
            with open(os.path.join(top, name), "rb") as f:
                while f.read(1 << 20):
                    pass


def run_weight_cache_daemon(opts, gpu_id, tp_rank, pp_rank):
    """0.5.17 daemon.py:539-589 (0.5.23 :625-663): logging, PDEATHSIG, load, serve."""
    logging.basicConfig(
        level=logging.INFO,
        format=f"%(asctime)s [Daemon gpu={gpu_id} tp_rank={tp_rank}] %(levelname)s %(message)s",
    )
    workers._prctl(workers.PR_SET_PDEATHSIG, signal.SIGKILL)  # pylint: disable=protected-access
    daemon = WeightCacheDaemon(opts, gpu_id, tp_rank, pp_rank)
    daemon.load()
    daemon.serve()


def _spawned(opts, gpu_id, tp_rank, pp_rank):
    """0.5.23's spawn child (daemon.py:685-697): the rank daemon, its parent's version."""
    os.environ["SGLANG_DOUBLE_VERSION"] = opts["version"]
    run_weight_cache_daemon(opts, gpu_id, tp_rank, pp_rank)


def launch_weight_cache_daemons(opts, dist_init_method, timeout, force):
    """0.5.17 daemon.py:592-812, 0.5.23 :700-880."""
    tp_size, pp_size, nnodes, node_rank = opts["tp_size"], opts["pp_size"], opts["nnodes"], opts["node_rank"]
    pp_size_per_node = max(pp_size // nnodes, 1)
    nnodes_per_pp_rank = max(nnodes // pp_size, 1)
    pp_rank_range = range(pp_size_per_node * (node_rank // nnodes_per_pp_rank),
                          pp_size_per_node * (node_rank // nnodes_per_pp_rank + 1))
    tp_size_per_node = tp_size // nnodes_per_pp_rank
    tp_rank_range = range(tp_size_per_node * (node_rank % nnodes_per_pp_rank),
                          tp_size_per_node * (node_rank % nnodes_per_pp_rank + 1))
    if nnodes > 1 and dist_init_method is None:
        raise ValueError(
            "dist_init_method is required for multi-node weight cache daemons. "
            "Use --dist-init-method tcp://<node0-ip>:<port> to specify the "
            "rendezvous address accessible from all nodes."
        )
    if dist_init_method is None:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("127.0.0.1", 0))
            dist_init_method = f"tcp://127.0.0.1:{s.getsockname()[1]}"
    ranks = []
    for pp_rank in pp_rank_range:
        for tp_rank in tp_rank_range:
            gpu_id = P.compute_local_gpu_id(pp_rank, tp_rank, pp_size_per_node, tp_size_per_node,
                                            base_gpu_id=opts["base_gpu_id"], gpu_id_step=opts["gpu_id_step"])
            ranks.append((pp_rank, tp_rank, gpu_id, P.daemon_key(tp_size, pp_rank, tp_rank, gpu_id)))
    for dummy, dummy, dummy, key in ranks:
        cleanup_stale_daemon_files(key, force=force)

    procs = []
    for pp_rank, tp_rank, gpu_id, key in ranks:
        if _v23():
            import multiprocessing  # pylint: disable=import-outside-toplevel

            proc = multiprocessing.get_context("spawn").Process(target=_spawned, args=(opts, gpu_id, tp_rank, pp_rank))
            proc.start()
        else:
            cmd = [sys.executable, "-m", "sglang.srt.weight_cache.daemon", "--model-path", opts["model_path"],
                   "--gpu-id", str(gpu_id), "--tp-size", str(tp_size), "--tp-rank", str(tp_rank),
                   "--dp-size", str(opts["dp_size"]), "--ep-size", str(opts["ep_size"]), "--pp-size", str(pp_size),
                   "--pp-rank", str(pp_rank), "--load-format", opts["load_format"], "--dtype", opts["dtype"],
                   "--dist-init-method", dist_init_method]
            if opts["quantization"]:
                cmd += ["--quantization", opts["quantization"]]
            if opts["model_loader_extra_config"] and opts["model_loader_extra_config"] != "{}":
                cmd += ["--model-loader-extra-config", opts["model_loader_extra_config"]]
            if opts["trust_remote_code"]:
                cmd += ["--trust-remote-code"]
            if opts["revision"]:
                cmd += ["--revision", opts["revision"]]
            proc = subprocess.Popen(cmd)  # pylint: disable=consider-using-with
        procs.append(proc)
        logger.info(f"Launched weight cache daemon gpu={gpu_id} pp_rank={pp_rank} tp_rank={tp_rank} pid={proc.pid}")

    def exitcode(p):
        return p.exitcode if _v23() else p.poll()

    def terminate(p):
        if exitcode(p) is None:
            p.terminate()

    check_interval = 2
    start_time = time.time()
    for pp_rank, tp_rank, dummy, key in ranks:
        ready_path = get_ready_path(key)
        while not os.path.exists(ready_path):
            time.sleep(check_interval)
            if time.time() - start_time > timeout:
                logger.error(f"Weight cache daemon pp_rank={pp_rank} tp_rank={tp_rank} "
                             f"did not become ready within {timeout}s")
                for p in procs:
                    p.terminate()
                raise TimeoutError(f"Weight cache daemon pp_rank={pp_rank} tp_rank={tp_rank} "
                                   f"did not become ready within {timeout}s")
            for p in procs:
                code = exitcode(p)
                if code is not None:
                    logger.error(f"Weight cache daemon exited prematurely with code {code}")
                    for other in procs:
                        terminate(other)
                    raise RuntimeError(f"Weight cache daemon exited prematurely with code {code}")
        logger.info(f"Weight cache daemon pp_rank={pp_rank} tp_rank={tp_rank} is ready")
    logger.info(
        f"All {len(procs)} weight cache daemons on node {node_rank} are ready "
        f"(pp_ranks={pp_rank_range.start}..{pp_rank_range.stop - 1}, "
        f"tp_ranks={tp_rank_range.start}..{tp_rank_range.stop - 1}, "
        f"dist_init_method={dist_init_method})"
    )
    _record("daemons_ready")  # the double's own: the launcher watches its ranks from now on
    exited = None
    try:
        while exited is None:
            for proc in procs:
                if exitcode(proc) is not None:
                    exited = proc
                    break
            else:
                time.sleep(1)
                continue
    except KeyboardInterrupt:
        logger.info("Received KeyboardInterrupt, shutting down daemons")
    finally:
        for proc in procs:
            terminate(proc)
        for proc in procs:
            if _v23():
                proc.join(timeout=5)
                if proc.is_alive():
                    proc.kill()
                    proc.join()
            else:
                try:
                    proc.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    proc.kill()
        logger.info("All weight cache daemons have been terminated")
    if exited is not None:
        raise RuntimeError(f"Weight cache daemon (pid={exited.pid}) exited with code "
                           f"{exitcode(exited)}; terminated the remaining daemons.")


def _parser_0517():
    """0.5.17 daemon.py:815-893."""
    parser = argparse.ArgumentParser(description="SGLang Weight Cache Daemon")
    parser.add_argument("--model-path", required=True, help="Path to model weights")
    parser.add_argument("--tp-size", type=int, default=1, help="Tensor parallel size")
    parser.add_argument("--gpu-id", type=int, default=None)
    parser.add_argument("--tp-rank", type=int, default=None)
    parser.add_argument("--dp-size", type=int, default=1, help="Data parallel size")
    parser.add_argument("--ep-size", type=int, default=1, help="Expert parallel size")
    parser.add_argument("--pp-size", type=int, default=1, help="Pipeline parallel size")
    parser.add_argument("--pp-rank", type=int, default=0, help="Pipeline parallel rank")
    parser.add_argument("--nnodes", type=int, default=1, help="Total number of nodes")
    parser.add_argument("--base-gpu-id", type=int, default=0)
    parser.add_argument("--gpu-id-step", type=int, default=1)
    parser.add_argument("--node-rank", type=int, default=0)
    parser.add_argument("--load-format", default="auto", help="Weight load format")
    parser.add_argument("--dtype", default="auto", help="Model dtype")
    parser.add_argument("--quantization", default=None, help="Quantization method")
    parser.add_argument("--model-loader-extra-config", default="{}")
    parser.add_argument("--trust-remote-code", action="store_true")
    parser.add_argument("--revision", default=None, help="Model revision")
    parser.add_argument("--dist-init-method", default=None)
    parser.add_argument("--timeout", type=int, default=1800)
    parser.add_argument("--force", action="store_true")
    return parser


def _main_0517():
    args = _parser_0517().parse_args()
    opts = {k: getattr(args, k) for k in ("model_path", "tp_size", "pp_size", "dp_size", "ep_size", "nnodes",
                                          "node_rank", "base_gpu_id", "gpu_id_step", "load_format", "dtype",
                                          "quantization", "model_loader_extra_config", "trust_remote_code",
                                          "revision")}
    opts["version"] = emulated_version()
    if args.gpu_id is not None or args.tp_rank is not None:  # single-rank mode (daemon.py:895-922)
        gpu_id = args.gpu_id if args.gpu_id is not None else args.tp_rank
        tp_rank = args.tp_rank if args.tp_rank is not None else args.gpu_id
        cleanup_stale_daemon_files(P.compute_global_rank(args.tp_size, args.pp_rank, tp_rank), force=args.force)
        run_weight_cache_daemon(opts, gpu_id, tp_rank, args.pp_rank)
    else:
        launch_weight_cache_daemons(opts, args.dist_init_method, args.timeout, args.force)


def _worker_parser_0523():
    """0.5.23 daemon.py:109-130 (WeightCacheDaemonArgs.add_cli_args)."""
    worker_parser = argparse.ArgumentParser(add_help=False)
    worker_parser.add_argument("--gpu-id", type=int, default=None)
    worker_parser.add_argument("--tp-rank", type=int, default=None)
    worker_parser.add_argument("--pp-rank", type=int, default=0)
    worker_parser.add_argument("--dist-init-method", default=None)
    worker_parser.add_argument("--timeout", type=int, default=1800)
    worker_parser.add_argument("--force", action="store_true")
    return worker_parser


def _main_0523():
    """0.5.23 daemon.py:883-926: the daemon's own options, then every server option (prepare_server_args, which
    also sets up logging: server_args.py's `logging.basicConfig(..., force=True)`)."""
    worker_ns, server_argv = _worker_parser_0523().parse_known_args()
    from sglang.srt.server_args import prepare_server_args  # pylint: disable=import-outside-toplevel

    sa = prepare_server_args(server_argv)
    logging.basicConfig(level=logging.INFO, format="[%(asctime)s] %(message)s", datefmt="%Y-%m-%d %H:%M:%S",
                        force=True)
    opts = {"model_path": sa.model_path, "tp_size": sa.tp_size, "pp_size": sa.pp_size, "dp_size": sa.dp_size,
            "ep_size": sa.ep_size, "nnodes": sa.nnodes, "node_rank": sa.node_rank, "base_gpu_id": sa.base_gpu_id,
            "gpu_id_step": int(getattr(sa, "gpu_id_step", None) or 1),
            "load_format": getattr(sa, "load_format", None) or "auto", "dtype": getattr(sa, "dtype", None) or "auto",
            "quantization": getattr(sa, "quantization", None),
            "model_loader_extra_config": getattr(sa, "model_loader_extra_config", None) or "{}",
            "trust_remote_code": bool(getattr(sa, "trust_remote_code", False)),
            "revision": getattr(sa, "revision", None), "version": emulated_version()}
    if worker_ns.gpu_id is not None or worker_ns.tp_rank is not None:
        gpu_id = worker_ns.gpu_id if worker_ns.gpu_id is not None else worker_ns.tp_rank
        tp_rank = worker_ns.tp_rank if worker_ns.tp_rank is not None else worker_ns.gpu_id
        cleanup_stale_daemon_files(P.gpu_uuid(gpu_id), force=worker_ns.force)
        run_weight_cache_daemon(opts, gpu_id, tp_rank, worker_ns.pp_rank)
    else:
        launch_weight_cache_daemons(opts, worker_ns.dist_init_method, worker_ns.timeout, worker_ns.force)


if __name__ == "__main__":
    if _v23():
        _main_0523()
    else:
        _main_0517()
