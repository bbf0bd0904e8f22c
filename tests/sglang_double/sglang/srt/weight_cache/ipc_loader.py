"""The engine's side of the weight cache (`--weight-cache-mode client`, 0.5.17 on), as the wheels'
sglang/srt/weight_cache/ipc_loader.py has it: per rank, the allowlist, then the daemon's socket:

- socket file missing            -> "Daemon socket not found", then the disk load (the only fallback)
- not a socket of this user      -> RuntimeError "Refusing to connect"
- connection refused             -> RuntimeError "... refused the connection ..." (a dead daemon's socket)
- CacheConfig mismatch           -> RuntimeError "Daemon config mismatch!" (the daemon keeps serving)
- a match                        -> "Zero-copy: mapped N tensors", a watchdog on the daemon's pid (SIGKILL of the
                                    rank's scheduler when it is gone)

Each RuntimeError is the scheduler's exception: the engine ends as it does for any (sglang/_double/server.py)."""
import os
import stat
import socket as socket_mod
import time

from sglang._double.config import at_least, emulated_version
from sglang.srt.weight_cache import protocol as P


class LoadError(RuntimeError):
    """What the scheduler raises (its class name is printed as the real one's)."""

    def __init__(self, message, cls_name="RuntimeError"):
        super().__init__(message)
        self.cls_name = cls_name


def socket_path_for(args, tp_rank, pp_rank, gpu):
    """--weight-cache-socket (one path for every rank: model_runner.py:1031-1032 passes the same value to each), else
    the version's own path: 0.5.17 load_model_utils.py:248-255 (global rank), 0.5.23 ipc_loader.py:457-460 (the
    GPU's UUID)."""
    if getattr(args, "weight_cache_socket", None):
        return args.weight_cache_socket
    try:
        return P.get_socket_path(P.daemon_key(args.tp_size, pp_rank, tp_rank, gpu))
    except ValueError as e:  # 0.5.23: a template without {device_uuid}
        raise LoadError(str(e), "ValueError")


def fetch(args, tp_rank, pp_rank, gpu, log):
    """IpcModelLoader.load_model up to the mapping (0.5.17 ipc_loader.py:80-160, 427-542). Returns the daemon's answer,
    or None for the disk fallback."""
    config, method, quant_config = P.cache_config(
        args.model_path, getattr(args, "dtype", None), getattr(args, "quantization", None),
        getattr(args, "revision", None), args.tp_size, tp_rank, args.pp_size, pp_rank, args.dp_size, args.ep_size)
    try:
        P.check_ipc_quant_support(method, quant_config, where="client")  # ipc_loader.py:98-99, before the socket
    except P.UnsupportedQuantForIPCError as e:
        raise LoadError(str(e), "sglang.srt.weight_cache.protocol.UnsupportedQuantForIPCError")
    path = socket_path_for(args, tp_rank, pp_rank, gpu)
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        log(f"[IpcModelLoader] Daemon socket not found at {path}.")
        return None
    if not stat.S_ISSOCK(st.st_mode) or st.st_uid != os.getuid():
        raise LoadError(f"[IpcModelLoader] Refusing to connect: {path} is not "
                        f"a socket owned by this user.")
    sock = socket_mod.socket(socket_mod.AF_UNIX, socket_mod.SOCK_STREAM)
    try:
        sock.settimeout(30)
        sock.connect(path)
    except FileNotFoundError:
        sock.close()
        return None
    except ConnectionRefusedError:
        sock.close()
        raise LoadError(f"[IpcModelLoader] Daemon socket exists at {path} but "
                        f"refused the connection. The daemon may have crashed after "
                        f"creating the socket. Check daemon logs.")
    except Exception as e:  # pylint: disable=broad-except
        sock.close()
        raise LoadError(f"[IpcModelLoader] Failed to connect to daemon at {path}: {e}")
    try:
        log(f"[IpcModelLoader] Requesting weights from daemon at "
            f"{path} with config: "
            f"model={config['model_path']}, "
            f"arch={config['model_arch']}, "
            f"tp={config['tp_size']}/{config['tp_rank']}, "
            f"quant={config['quant_method']}, "
            f"dtype={config['dtype']}")
        P.send_msg(sock, {"type": "fetch_state", "config": config})
        result = P.recv_msg(sock)
        if result.get("status") != "ok":
            raise LoadError(f"[IpcModelLoader] Daemon config mismatch!\n"
                            f"  Engine config: {config}\n"
                            f"  Daemon config: {result.get('daemon_config', {})}")
        return result
    except LoadError:
        raise
    except Exception as e:  # pylint: disable=broad-except
        raise LoadError(f"[IpcModelLoader] Error communicating with daemon at {path}: {e}")
    finally:
        sock.close()


def mapped(result, tic, mode, log):
    """The log of a successful mapping (0.5.17 ipc_loader.py:120-158, 420-423; 0.5.23 names the transport)."""
    n = len(result["entries"])
    if at_least(emulated_version(), "0.5.23"):
        log(f"[IpcModelLoader] Fetched {n} tensors from daemon (transport={result.get('transport_backend', 'torch_ipc')}) "
            f"in {time.perf_counter() - tic:.2f}s")
    else:
        log(f"[IpcModelLoader] Fetched {n} IPC handles from daemon in {time.perf_counter() - tic:.2f}s")
    log(f"[IpcModelLoader] Zero-copy: mapped {n} tensors (0 new post-quant), time=0.001s")
    log(f"[IpcModelLoader] Started daemon-liveness watchdog for pid={result['pid']}")
    log(f"[IpcModelLoader] Loaded model via IPC (mode={mode}), total={time.perf_counter() - tic:.2f}s")


def daemon_alive(pid):
    """ipc_loader.py:180-187."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def daemon_died_message(pid):
    return (f"[IpcModelLoader] Weight cache daemon (pid={pid}) "
            f"died while this engine holds its weights via CUDA IPC. "
            f"The mapped weight pointers are now dangling; continuing "
            f"would read freed GPU memory. Terminating this process.")
