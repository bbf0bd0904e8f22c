"""A real NCCL communicator, one rank per GPU, each rank a spawned child (a fresh interpreter of this venv).

tests/gpu/run.sh starts it with `env -i` after the nccl_env role, so the NCCL variables the ranks see came
through the venv's .pth; with NCCL_DEBUG=INFO, NCCL's own log says which ones it read. Without CUDA (the
rehearsal on the CPU) each rank reports its environment and creates no communicator.
"""
import json
import multiprocessing
import os
import sys
import tempfile

NAMES = ("NCCL_PROTO", "NCCL_ALGO", "NCCL_P2P_LEVEL", "NCCL_IB_DISABLE", "NCCL_DEBUG", "NCCL_DEBUG_SUBSYS")


def cuda_gpus():
    try:
        import torch
    except ImportError:
        return 0
    return torch.cuda.device_count()


def rank(r, world, store):
    print("rank %d of pid %d sees %s" % (r, os.getpid(), json.dumps(dict((k, os.environ.get(k)) for k in NAMES))),
          flush=True)
    if not world:
        print("rank %d: no CUDA here, no communicator" % r, flush=True)
        return
    import torch
    import torch.distributed as dist

    dist.init_process_group("nccl", store=dist.FileStore(store, world), rank=r, world_size=world,
                            device_id=torch.device("cuda", r))
    total = torch.ones(1, device="cuda:%d" % r)
    dist.all_reduce(total)
    torch.cuda.synchronize(r)
    print("rank %d: NCCL all-reduce over %d rank(s) gave %g" % (r, world, total.item()), flush=True)
    dist.destroy_process_group()


def main():
    world = cuda_gpus()
    ctx = multiprocessing.get_context("spawn")
    store = os.path.join(tempfile.mkdtemp(prefix="nccl-probe-"), "store")
    ranks = [ctx.Process(target=rank, args=(r, world, store)) for r in range(max(world, 1))]
    for p in ranks:
        p.start()
    for p in ranks:
        p.join()
    sys.exit(max(abs(p.exitcode) for p in ranks))


if __name__ == "__main__":
    main()
