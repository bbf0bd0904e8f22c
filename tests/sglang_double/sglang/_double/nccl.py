"""Real-GPU mode: a real NCCL communicator among a server's schedulers (SGLANG_DOUBLE_NCCL=1), as the real
server builds its tensor-parallel group: one rank per GPU, world size --tp, one group per --dp replica.

NCCL reads its variables from the scheduler's environment here, so with NCCL_DEBUG=INFO the server's log
shows which ones it took ("NCCL_PROTO set by environment to LL"), wherever they came from (a unit's
environment, or the nccl_env role's .pth, which sets them as the interpreter starts).
"""
import multiprocessing
import os
import re
import sys
import tempfile


def enabled():
    return os.environ.get("SGLANG_DOUBLE_NCCL", "0") not in ("", "0")


def communicator(title, gpu):
    """Joins the scheduler `title` (sglang::scheduler[_DP<d>][_TP<r>], no _TP with --tp 1) on `gpu` to its
    group and runs one all-reduce through it; returns the result tensor (kept for the life of the process), or
    None when off."""
    if not enabled():
        return None
    import torch  # only on a GPU machine
    import torch.distributed as dist

    from sglang.srt.server_args import prepare_server_args

    # a spawn child gets its parent's sys.argv: the server's own command line (after `serve` for `sglang serve`)
    argv = sys.argv[1:]
    if argv[:1] == ["serve"]:
        argv = argv[1:]
    tp = prepare_server_args(argv).tp_size
    dp = re.search(r"_DP(\d+)", title)
    rank = re.search(r"_TP(\d+)", title)
    dp, rank = int(dp.group(1)) if dp else 0, int(rank.group(1)) if rank else 0
    server = multiprocessing.parent_process().pid
    store = dist.FileStore(os.path.join(tempfile.gettempdir(), "sglang-double-nccl-%d-dp%d" % (server, dp)), tp)
    dist.init_process_group("nccl", store=store, rank=rank, world_size=tp, device_id=torch.device("cuda", gpu))
    total = torch.ones(1, device="cuda:%d" % gpu)
    dist.all_reduce(total)
    torch.cuda.synchronize(gpu)
    print("[double] %s: NCCL all-reduce over %d rank(s) gave %g" % (title, tp, total.item()), flush=True)
    return total
