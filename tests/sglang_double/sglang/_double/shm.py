"""The POSIX shared memory in /dev/shm that each version creates, with the real names, by the same process, at the same
phase and with the same calls as the wheels (tests/conformance/test_shm.py reads the wheels and checks these):

- `multi_tokenizer_args_<main pid>`: the main process, once the schedulers are up and before uvicorn binds, only with
  `--tokenizer-worker-num` > 1 (0.5.5 entrypoints/http_server.py:1389, 0.5.9 :1955, 0.5.15 :2340, 0.5.23 :2903, calling
  managers/multi_tokenizer_mixin.py write_data_for_multi_tokenizer: 0.5.5 :590, 0.5.9 :508, 0.5.15 :742, 0.5.23 :1001,
  `SharedMemory(create=True, size=size, name=name)`); unlinked in the `finally` after uvicorn.run returns (0.5.5
  http_server.py:1428, 0.5.9 :1998, 0.5.15 :2474, 0.5.23 :3081), which a SIGKILL of the process never reaches.
- the TP group's in_the_same_node_as check: its rank 0 scheduler creates a 128-byte segment and unlinks it after the
  group's barrier (distributed/parallel_state.py: 0.5.5 :1872/:1906, 0.5.9 :2170/:2204, `SharedMemory(create=True,
  size=128)`, a nameless `psm_<hex>`; 0.5.15 :2643/:2679, 0.5.23 :3418/:3454, `name=make_shm_name("nodecheck")`);
- the TP group's message queue (GroupCoordinator, `--tp` > 1, SGLANG_USE_MESSAGE_QUEUE_BROADCASTER true by default:
  parallel_state.py 0.5.15 :469-473, 0.5.23 :563-567, `MessageQueue.create_from_process_group(self.cpu_group, 1 << 22,
  6)`): its writer, the TP rank 0 scheduler, creates `(max_chunk_bytes + metadata_size) * max_chunks` bytes
  (device_communicators/shm_broadcast.py: 0.5.5/0.5.9 :105 nameless `psm_<hex>`, 0.5.15 :104-107, 0.5.23 :103-106
  `name=make_shm_name("mq")`) for the server's life; its __del__ unlinks it (0.5.5/0.5.9 :147, 0.5.15 :148, 0.5.23
  :147) when the scheduler returns from a ShutdownReq (0.5.15+; 0.5.5/0.5.9 stop with SIGKILL only);
- `sglang_loads_<instance id>_<blake2s(instance id, 4)>.shm` (0.5.15+, managers/load_snapshot.py shm_path_for: 0.5.15
  :361-365, 0.5.23 :299-303): the main process draws the instance id (server_args.py PortArgs: 0.5.15 :7218, 0.5.23
  :784, `uuid.uuid4().hex[:12]`), the rank-zero scheduler (pp 0, attention TP 0: scheduler.py 0.5.15 :614-618, 0.5.23
  :816) opens it in init_ipc_channels, before its model and distributed init (0.5.15 :399 before :423), with
  `os.open(path, O_CREAT | O_RDWR, 0o600)`, header plus 16 KiB a DP rank (load_snapshot.py 0.5.15 :347-369, :397;
  0.5.23 :287, :335); nothing ever unlinks it.
`make_shm_name(kind)` is `f"sgl_shm_{kind}_{os.getpid()}_{uuid.uuid4().hex[:8]}"` (utils/stale_shm_cleanup.py: 0.5.15
:24-27, 0.5.23 :31-32). Not emulated: the kinds `mm` (managers/mm_utils.py, multimodal inputs) and `sync` (0.5.15
utils/cuda_ipc_transport_utils.py, CUDA IPC of multimodal features): the double serves text only.

SharedMemory(create=True) registers the segment with multiprocessing's resource tracker, a child of the main process
shared by the spawned schedulers: it unlinks what is still registered once every process holding it is gone, unless it
is killed with them (kill_process_tree takes every descendant, the tracker too; so does a SIGKILL of the whole tree).

With SGLANG_DOUBLE_STATE_FILE set, the file beside it named `<state file>.shm` gets a `shm_created` / `shm_unlinked`
record per segment (the double's own test channel; the state file itself keeps the server's events only)."""
import hashlib
import json
import mmap
import os
import struct
import time
import uuid
from multiprocessing import shared_memory

from sglang._double.config import at_least

SHM_DIR = "/dev/shm"
SLOT_SIZE = 16 * 1024  # load_snapshot.py SLOT_SIZE
HEADER = struct.Struct("<4sHHI")  # load_snapshot.py HEADER_STRUCT: MAGIC, VERSION, dp_size, slot_size
_HELD = []  # segments and maps kept for the life of the process
# make_shm_name kinds of the wheels that the double never creates, and why (tests/conformance/test_shm.py: a kind of a
# wheel that is neither created by the double nor listed here fails)
NOT_EMULATED = {
    "mm": "managers/mm_utils.py: multimodal inputs; the double serves text only",
    "sync": "0.5.15 utils/cuda_ipc_transport_utils.py: CUDA IPC of multimodal features",
}


def record(state_file, event, name):
    if state_file:
        with open(state_file + ".shm", "a", encoding="utf-8") as f:
            f.write(json.dumps({"event": event, "name": name, "time": time.time(), "pid": os.getpid()}) + "\n")


def make_shm_name(kind):
    return "sgl_shm_%s_%d_%s" % (kind, os.getpid(), uuid.uuid4().hex[:8])


def new_instance_id():
    return uuid.uuid4().hex[:12]


def loads_path(instance_id):
    """load_snapshot.py shm_path_for(port_args.instance_id)."""
    name = os.path.basename(instance_id.rstrip("/")) or "default"
    safe = "".join(c if c.isalnum() or c in "._-" else "_" for c in name)
    digest = hashlib.blake2s(instance_id.encode(), digest_size=4).hexdigest()
    return "%s/sglang_loads_%s_%s.shm" % (SHM_DIR, safe, digest)


def _create(size, name, state_file):
    """SharedMemory(create=True, size=size[, name=name]): a name from 0.5.15, Python's own psm_<hex> before."""
    shm = shared_memory.SharedMemory(create=True, size=size, name=name) if name else \
        shared_memory.SharedMemory(create=True, size=size)
    record(state_file, "shm_created", shm.name)
    return shm


def _unlink(shm, state_file):
    name = shm.name
    shm.close()
    try:
        shm.unlink()
    except FileNotFoundError:
        return
    record(state_file, "shm_unlinked", name)


class SchedulerSegments:
    """A scheduler's segments: the load snapshot file (rank zero, 0.5.15+), the TP group's node check and message
    queue (TP rank 0 with --tp > 1). release(): the clean path of a ShutdownReq."""

    def __init__(self, version, tp_rank, tp_size, pp_rank, dp_size, instance_id, state_file):
        self.state_file = state_file
        self.mq = None
        named = at_least(version, "0.5.15")
        if named and pp_rank == 0 and tp_rank == 0 and instance_id:
            path = loads_path(instance_id)
            fd = os.open(path, os.O_CREAT | os.O_RDWR, 0o600)
            size = HEADER.size + dp_size * SLOT_SIZE
            os.ftruncate(fd, size)
            m = mmap.mmap(fd, size, access=mmap.ACCESS_WRITE)
            HEADER.pack_into(m, 0, b"SLNS", 1, dp_size, SLOT_SIZE)
            _HELD.append((fd, m))
            record(state_file, "shm_created", os.path.basename(path))
        if tp_size > 1 and tp_rank == 0:
            check = _create(128, make_shm_name("nodecheck") if named else None, state_file)
            check.buf[:13] = b"magic_message"
            _unlink(check, state_file)  # after the group's barrier
            max_chunk_bytes, max_chunks, metadata_size = 1 << 22, 6, 1 + (tp_size - 1)
            self.mq = _create((max_chunk_bytes + metadata_size) * max_chunks,
                              make_shm_name("mq") if named else None, state_file)
            offset = max_chunk_bytes * max_chunks
            self.mq.buf[offset:offset + metadata_size * max_chunks] = bytes(metadata_size * max_chunks)

    def release(self):
        if self.mq is not None:
            _unlink(self.mq, self.state_file)
            self.mq = None


class TokenizerArgs:
    """multi_tokenizer_args_<pid> of the main process (--tokenizer-worker-num > 1)."""

    def __init__(self, payload, state_file):
        self.state_file = state_file
        name = "multi_tokenizer_args_%d" % os.getpid()
        self.shm = _create(max(len(payload), 1), name, state_file)
        self.shm.buf[:len(payload)] = payload
        self.shm.close()  # write_data_for_multi_tokenizer: args_shm.close(), the segment stays

    def unlink(self):
        if self.shm is not None:
            try:
                self.shm.unlink()
            except FileNotFoundError:
                pass
            else:
                record(self.state_file, "shm_unlinked", self.shm.name)
            self.shm = None
