"""The server's child processes: schedulers (one per TP rank), the detokenizer, and fault-made orphans.

Each runs in a multiprocessing "spawn" child, as in the real server, so its command line starts as
`python -c from multiprocessing.spawn import spawn_main; ...` until setproctitle retitles it.
"""
import ctypes
import glob
import os
import re
import signal
import time

from sglang._double import nccl
from sglang._double import shm

# The double's ShutdownReq (0.5.15 managers/tokenizer_manager.py:2684, 0.5.23 :3547): the scheduler's event loop ends
# and run_scheduler_process returns (0.5.15 managers/scheduler.py:4328-4349), a clean exit, 0. A signal of its own, so
# that a SIGTERM from outside still kills a scheduler at once (the real one installs no handler for it).
SHUTDOWN_REQ = signal.SIGUSR1

PR_SET_NAME = 15
PR_SET_PDEATHSIG = 1
_GPU_NODE = re.compile(r"nvidia(\d+)$")


def _prctl(option, arg):
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(option, arg, 0, 0, 0)


def device_files(globs, gpu):
    """What a CUDA process on GPU `gpu` holds: its own /dev/nvidiaN plus every shared node (ctl, uvm, caps)."""
    held = []
    for pattern in globs:
        for path in sorted(glob.glob(pattern)):
            if os.path.isdir(path):
                continue
            m = _GPU_NODE.search(os.path.basename(path))
            if m and int(m.group(1)) != gpu:
                continue
            held.append(path)
    return held


_HELD = []  # open device files and CUDA buffers, kept for the life of the process
_SEGMENTS = []  # this scheduler's shared memory (shm.SchedulerSegments)


def _hold(paths):
    _HELD.extend(open(p, "rb") for p in paths)  # pylint: disable=consider-using-with


def _cuda_allocate(gpu, gib):
    """Real-GPU mode: create a CUDA context on `gpu` and keep `gib` GiB allocated."""
    import torch  # only on a GPU machine

    torch.cuda.set_device(gpu)
    return torch.empty(int(gib * (1 << 30)), dtype=torch.uint8, device="cuda:%d" % gpu)


def _sleep_forever():
    while True:
        time.sleep(3600)


def _become(title, devices, cuda_gib, gpu):
    if title:
        import setproctitle

        setproctitle.setproctitle(title)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # no handler: SIGTERM kills a scheduler at once
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(SHUTDOWN_REQ, _shutdown)
    _hold(devices)
    if cuda_gib:
        _HELD.append(_cuda_allocate(gpu, cuda_gib))
        if title:
            _HELD.append(nccl.communicator(title, gpu))


def _shutdown(signum, frame):  # pylint: disable=unused-argument
    """A ShutdownReq: the clean path's releases (the message queue's __del__ unlinks its segment), exit 0."""
    for seg in _SEGMENTS:
        seg.release()
    os._exit(0)


def run_dp_controller(title, schedulers, ready):
    """Entry of `sglang::data_parallel_controller` (--dp > 1): the parent of the schedulers, as in the real
    server. schedulers: [(title, devices, kwargs)]; ready is told once every scheduler holds its devices."""
    import multiprocessing

    _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    _become(title, [], 0.0, 0)
    ctx = multiprocessing.get_context("spawn")
    pipes, procs = [], []
    for sched_title, devices, kwargs in schedulers:
        rx, tx = ctx.Pipe(duplex=False)
        p = ctx.Process(target=run, name=sched_title, args=(sched_title, devices), kwargs=dict(kwargs, ready=tx))
        p.start()
        pipes.append(rx)
        procs.append(p)

    def forward(signum, frame):  # pylint: disable=unused-argument
        """The controller hands the ShutdownReq to its schedulers and ends once they did."""
        for p in procs:
            try:
                os.kill(p.pid, SHUTDOWN_REQ)
            except ProcessLookupError:
                pass
        for p in procs:
            p.join()
        os._exit(0)

    signal.signal(SHUTDOWN_REQ, forward)
    for rx in pipes:
        rx.recv()
    ready.send(True)
    _sleep_forever()


def serve_steps(engine):
    """A scheduler's event loop, as the tokenizer manager sees it: each request of the server's (a step: a
    prefill of so many seconds, or one token) is answered once done, one at a time, so a long prefill holds every
    other output back (SGLang runs one batch at a time) and burns this process's CPU meanwhile, and a stopped
    scheduler (SIGSTOP) answers nothing: the server's generations and its /health_generate then wait."""
    while True:
        try:
            prefill = engine.recv()
        except (EOFError, OSError):
            return
        end = time.monotonic() + prefill
        while time.monotonic() < end:
            pass  # the forward passes of a chunked prefill keep the scheduler busy
        engine.send(True)


def run(title, devices, detach=False, untitled=False, cuda_gib=0.0, gpu=0, ready=None, engine=None, segments=None):
    """Entry of a spawned child.

    detach: fork once more and leave, so the worker is reparented (to PID 1 or a subreaper) in a
    session of its own, as orphaned schedulers are, and outlives the server; untitled: keep the spawn
    command line, as a torch worker does.
    ready: the sending end of a pipe, told once the devices are held.
    engine: this scheduler's end of the server's request pipe (serve_steps), or None.
    segments: a scheduler's shm.SchedulerSegments arguments (its shared memory, made before it reports ready), or None.
    """
    if detach:
        if os.fork() > 0:
            os._exit(0)  # the spawned child leaves; its child is adopted
        os.setsid()
    else:
        _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    _become(None if untitled else title, devices, cuda_gib, gpu)
    if segments is not None:
        _SEGMENTS.append(shm.SchedulerSegments(**segments))
    if ready is not None:
        ready.send(True)
    if engine is not None:
        serve_steps(engine)
    _sleep_forever()
