"""The weight cache's protocol, per version, as the wheels' sglang/srt/weight_cache/protocol.py has it: the socket and
ready paths, CacheConfig (the fingerprint a client must match), the quantization allowlist, the stale-file cleanup.

The wire format is the double's own (a 4-byte length, then JSON; the real one pickles, protocol.py:219-237 in 0.5.17):
the requests ("fetch_state", "query_config", "ping"), the answers' statuses and keys are the real ones. The double has
no GPU: a "tensor" is a name with a shape, and a GPU's identity on 0.5.23 is a fake UUID per physical index
(gpu_uuid below)."""

# The log lines are the wheel's, written as its f-strings write them (tests/conformance compares them), and its
# throwaway names (`conn, _ = sock.accept()`) are kept as it names them.
# pylint: disable=logging-fstring-interpolation,logging-not-lazy,disallowed-name
import hashlib
import json
import logging
import os
import signal
import struct

from sglang._double.config import at_least, emulated_version

logger = logging.getLogger(__name__)

# 0.5.17 protocol.py:35 and :38: fixed, keyed by global rank (tp_size * pp_rank + tp_rank, :280-287)
WEIGHT_CACHE_SOCKET_TEMPLATE = "/tmp/sglang_weight_cache_rank{global_rank}.sock"
WEIGHT_CACHE_READY_TEMPLATE = "/tmp/sglang_weight_cache_rank{global_rank}.ready"
# 0.5.23 environ.py:2174-2178: templates from the environment, keyed by the GPU's UUID (protocol.py:300-325)
SOCKET_TEMPLATE_ENV = "SGLANG_WEIGHT_CACHE_SOCKET_TEMPLATE"
READY_TEMPLATE_ENV = "SGLANG_WEIGHT_CACHE_READY_TEMPLATE"
DEFAULT_SOCKET_TEMPLATE_0523 = "/tmp/sglang_weight_cache_{device_uuid}.sock"
DEFAULT_READY_TEMPLATE_0523 = "/tmp/sglang_weight_cache_{device_uuid}.ready"
# Tests on a shared host only (the real 0.5.17 has no such setting): the directory that stands for /tmp in 0.5.17's
# fixed paths, so that two test runs do not share /tmp/sglang_weight_cache_rank0.*. The collection must not use it.
ROOT_KNOB = "SGLANG_DOUBLE_WEIGHT_CACHE_ROOT"

# CacheConfig's fields in order (0.5.17 protocol.py:48-65; 0.5.23 adds the MoE/attention layout after ep_size)
FIELDS_0517 = ("model_path", "model_arch", "tp_size", "tp_rank", "pp_size", "pp_rank", "dp_size", "ep_size",
               "quant_method", "quant_config_hash", "dtype", "revision", "device_capability", "torch_version")
FIELDS_0523_EXTRA = ("moe_dp_size", "moe_dp_rank", "moe_ep_rank", "attn_dp_size", "enable_dp_lm_head", "attn_cp_size",
                     "moe_dense_tp_size", "moe_a2a_backend")

# the torch each wheel pins (METADATA `Requires-Dist: torch==`): compute_env_stamp's torch_version (protocol.py:251-277)
TORCH = {"0.5.17": "2.11.0", "0.5.23": "2.14.1"}
# compute_env_stamp's device_capability: the double's GPUs are H100s (sm 9.0)
DEVICE_CAPABILITY = "9.0"


def version():
    return emulated_version()


def cache_fields(v=None):
    v = v or version()
    if at_least(v, "0.5.23"):
        i = FIELDS_0517.index("ep_size") + 1
        return FIELDS_0517[:i] + FIELDS_0523_EXTRA + FIELDS_0517[i:]
    return FIELDS_0517


def gpu_uuid(gpu_id):
    """current_platform.get_device_uuid(gpu_id) for the double: the physical GPU behind CUDA_VISIBLE_DEVICES' entry
    gpu_id (an index, or a UUID given there as is), as a stable fake UUID `GPU-00d0b1e0-0000-4000-8000-<index, 12
    digits>`."""
    visible = [v.strip() for v in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if v.strip()]
    physical = visible[gpu_id] if gpu_id < len(visible) else str(gpu_id)
    if physical.startswith("GPU-"):
        return physical
    return "GPU-00d0b1e0-0000-4000-8000-%012d" % int(physical)


def _root_0517(path):
    root = os.environ.get(ROOT_KNOB)
    return os.path.join(root, os.path.basename(path)) if root else path


def _format_daemon_path(env, default, device_uuid):
    """0.5.23 protocol.py:300-315: a template without {device_uuid} is refused."""
    template = os.environ.get(env, default)
    if "{device_uuid}" not in template:
        raise ValueError(
            f"{env}={template!r} must contain '{{device_uuid}}': "
            f"each physical GPU needs its own path, and a GPU-independent one "
            f"would point every caller at a single daemon."
        )
    return template.format(device_uuid=device_uuid)


def daemon_key(tp_size, pp_rank, tp_rank, gpu_id):
    """What names a daemon's files: the global rank on 0.5.17, the GPU's UUID on 0.5.23."""
    if at_least(version(), "0.5.23"):
        return gpu_uuid(gpu_id)
    return compute_global_rank(tp_size, pp_rank, tp_rank)


def get_socket_path(key):
    if at_least(version(), "0.5.23"):
        return _format_daemon_path(SOCKET_TEMPLATE_ENV, DEFAULT_SOCKET_TEMPLATE_0523, key)
    return _root_0517(WEIGHT_CACHE_SOCKET_TEMPLATE.format(global_rank=key))


def get_ready_path(key):
    if at_least(version(), "0.5.23"):
        return _format_daemon_path(READY_TEMPLATE_ENV, DEFAULT_READY_TEMPLATE_0523, key)
    return _root_0517(WEIGHT_CACHE_READY_TEMPLATE.format(global_rank=key))


def compute_global_rank(tp_size, pp_rank, tp_rank):
    return tp_size * pp_rank + tp_rank  # 0.5.17 protocol.py:280-287


def compute_local_gpu_id(pp_rank, tp_rank, pp_size_per_node, tp_size_per_node, base_gpu_id=0, gpu_id_step=1):
    # 0.5.17 protocol.py:290-311
    return base_gpu_id + (pp_rank % pp_size_per_node) * tp_size_per_node + (tp_rank % tp_size_per_node) * gpu_id_step


# --- the model's fingerprint -----------------------------------------------------------------------------------------
def read_model_config(model_path):
    """config.json of a local model directory ({} when there is none: the double serves made-up paths too)."""
    try:
        with open(os.path.join(model_path, "config.json"), encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError):
        return {}


_DTYPES = {"half": "float16", "float16": "float16", "bfloat16": "bfloat16", "float": "float32", "float32": "float32"}


def resolve_dtype(dtype, hf):
    """str(model_config.dtype): `auto` takes config.json's torch_dtype (float32 checkpoints served as bfloat16)."""
    if dtype in (None, "", "auto"):
        found = hf.get("torch_dtype") or hf.get("dtype") or "bfloat16"
        name = found if found in ("float16", "bfloat16") else "bfloat16"
    else:
        name = _DTYPES.get(dtype, dtype)
    return "torch.%s" % name


def quant_of(quantization, hf):
    """(quant_method, quant_config) as the daemon (0.5.17 daemon.py:245-250) and the client (ipc_loader.py:209-221)
    resolve them: --quantization, else config.json's quantization_config's quant_method."""
    quant_config = hf.get("quantization_config")
    method = quantization or ""
    if not method and isinstance(quant_config, dict):
        method = str(quant_config.get("quant_method", ""))  # ModelConfig takes it from config.json
    return method, quant_config


def hash_quant_config(quant_config):
    if quant_config is None:  # 0.5.17 protocol.py:79-114 (a dict: sha256 of its sorted JSON)
        return ""
    return hashlib.sha256(json.dumps(quant_config, sort_keys=True).encode()).hexdigest()


def cache_config(model_path, dtype, quantization, revision, tp_size, tp_rank, pp_size, pp_rank, dp_size, ep_size):
    """CacheConfig.to_dict() of a daemon or a client (0.5.17 daemon.py:252-270, ipc_loader.py:491-509)."""
    hf = read_model_config(model_path)
    method, quant_config = quant_of(quantization, hf)
    archs = hf.get("architectures") or []
    values = {
        "model_path": model_path, "model_arch": archs[0] if archs else "", "tp_size": tp_size, "tp_rank": tp_rank,
        "pp_size": pp_size, "pp_rank": pp_rank, "dp_size": dp_size, "ep_size": ep_size, "quant_method": method,
        "quant_config_hash": hash_quant_config(quant_config), "dtype": resolve_dtype(dtype, hf),
        "revision": revision or "", "device_capability": DEVICE_CAPABILITY, "torch_version": TORCH.get(version(), ""),
        # 0.5.23's layout fields, as the double's engine has them (no DP attention, no MoE data parallelism)
        "moe_dp_size": 1, "moe_dp_rank": 0, "moe_ep_rank": tp_rank // max(tp_size // max(ep_size, 1), 1),
        "attn_dp_size": 1, "enable_dp_lm_head": False, "attn_cp_size": 1, "moe_dense_tp_size": None,
        "moe_a2a_backend": "none",
    }
    return {f: values[f] for f in cache_fields()}, method, quant_config


def tensor_count(model_path, tp_size):
    """How many tensors a rank exports (the double's made-up count: 6 per layer, embeddings, norm, head)."""
    layers = int(read_model_config(model_path).get("num_hidden_layers", 1) or 1)
    return 6 * layers + 3 + (1 if tp_size else 0)


# --- the quantization allowlist (0.5.17 protocol.py:144-208, 0.5.23 the same) ---------------------------------------
class UnsupportedQuantForIPCError(RuntimeError):
    """Raised when a quantization method is not on the verified allowlist for CUDA IPC zero-copy weight sharing."""


def _fp8_round_trips_via_ipc(quant_config):
    return isinstance(quant_config, dict) and quant_config.get("weight_block_size") is not None


IPC_QUANT_ALLOWLIST = {
    "": lambda _quant_config: True,  # unquantized
    "fp8": _fp8_round_trips_via_ipc,  # only block-wise FP8 verified
}


def check_ipc_quant_support(quant_method, quant_config, *, where):
    predicate = IPC_QUANT_ALLOWLIST.get(quant_method)
    if predicate is not None and predicate(quant_config):
        return
    verified = ", ".join((repr(m) if m else "'' (unquantized)") for m in IPC_QUANT_ALLOWLIST)
    raise UnsupportedQuantForIPCError(
        f"[weight_cache:{where}] quantization method {quant_method!r} is not "
        f"verified for CUDA IPC zero-copy weight sharing. Its "
        f"process_weights_after_loading may stamp Python-side metadata "
        f"(e.g. format_ue8m0) or repack/transpose weights into shapes the "
        f"meta-initialized client cannot reproduce, which would silently serve "
        f"wrong-numerics weights. Verified methods: {verified}. Note: FP8 is "
        f"only verified for block-wise configs (weight_block_size set), not "
        f"per-tensor FP8. Disable the weight cache (--weight-cache-mode off) "
        f"for this model."
    )


# --- messages --------------------------------------------------------------------------------------------------------
MAX_MSG_SIZE = 256 * 1024 * 1024


def send_msg(sock, obj):
    data = json.dumps(obj).encode()
    sock.sendall(struct.pack("!I", len(data)) + data)


def recv_msg(sock):
    header = _recv_exact(sock, 4)
    if header is None:
        raise ConnectionError("Connection closed while reading message header")
    length = struct.unpack("!I", header)[0]
    if length > MAX_MSG_SIZE:
        raise ValueError(f"Message size {length} exceeds {MAX_MSG_SIZE} byte cap")
    data = _recv_exact(sock, length)
    if data is None:
        raise ConnectionError("Connection closed while reading message body")
    return json.loads(data.decode())


def _recv_exact(sock, n):
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            return None
        buf.extend(chunk)
    return bytes(buf)


# --- stale files (0.5.17 protocol.py:330-391; 0.5.23 :339-389 names the GPU instead of the rank) --------------------
def _read_ready_pid(ready_path):
    try:
        with open(ready_path) as f:
            for line in f:
                if line.startswith("pid="):
                    return int(line.strip().split("=", 1)[1])
    except (OSError, ValueError):
        pass
    return None


def _is_pid_alive(pid):
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


def cleanup_stale_daemon_files(key, *, force=False):
    ready_path = get_ready_path(key)
    socket_path = get_socket_path(key)
    if not os.path.exists(ready_path) and not os.path.exists(socket_path):
        return
    pid = _read_ready_pid(ready_path) if os.path.exists(ready_path) else None
    what = f"GPU {key}" if at_least(version(), "0.5.23") else f"rank {key}"
    if pid is not None and _is_pid_alive(pid):
        if not force:
            raise RuntimeError(
                f"Weight cache daemon for {what} is already running "
                f"(pid={pid}, ready={ready_path}). Stop the existing daemon before "
                f"launching a new one, or pass force=True (--force) to kill it and "
                f"take over."
            )
        logger.warning(
            f"[weight_cache] force takeover: killing existing daemon pid={pid} "
            f"for {what} and reclaiming its socket/ready files."
        )
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    for path in (ready_path, socket_path):
        if os.path.exists(path):
            os.unlink(path)
            logger.info(f"Removed stale daemon file: {path}")
