"""A server's place in a multi-node SGLang server, read from its argv as argparse would, and the refusal to cut one
rank over alone."""
import pytest

from ansible_collections.inferops.sglang.plugins.module_utils._server import multinode as _multinode

HEAD = ["/v/bin/python", "-m", "sglang.launch_server", "--model-path", "/m", "--tp", "16"]


@pytest.mark.parametrize("args, nnodes, rank, addr", [
    (["--nnodes", "2", "--node-rank", "1", "--dist-init-addr", "10.0.0.1:20000"], 2, 1, "10.0.0.1:20000"),
    (["--nnodes=4", "--node-rank=0", "--dist-init-addr=[fd00::1]:20000"], 4, 0, "[fd00::1]:20000"),
    (["--nnode", "2", "--node-r", "1", "--dist-init", "h0:5000"], 2, 1, "h0:5000"),  # argparse's prefixes
    (["--nnodes", "2", "--node-rank", "1", "--nccl-init-addr", "h0:5000"], 2, 1, "h0:5000"),  # the older spelling
    (["--nnodes", "3", "--nnodes", "2", "--node-rank", "1", "--node-rank", "0"], 2, 0, None),  # the last one wins
    (["--nnodes", "2"], 2, 0, None),  # no --node-rank: rank 0
])
def test_of_argv(args, nnodes, rank, addr):
    found = _multinode.of_argv(HEAD + args)
    assert found == {"nnodes": nnodes, "node_rank": rank, "dist_init_addr": addr,
                     "role": "rank 0" if rank == 0 else "rank >= 1"}


@pytest.mark.parametrize("args", [
    [], ["--nnodes", "1", "--node-rank", "0"], ["--nccl-port", "2000"], ["--dist-timeout", "600"],
    ["--served-model-name", "nnodes"], ["--node-rank"],
])
def test_a_server_of_one_host_is_none(args):
    assert _multinode.of_argv(HEAD + args) is None


def test_sglang_serve_and_a_value_that_is_not_a_number():
    found = _multinode.of_argv(["/v/bin/sglang", "serve", "/m", "--nnodes", "2", "--node-rank", "x"])
    assert found["nnodes"] == 2 and found["node_rank"] == "x" and found["role"] == "rank >= 1"


def test_refusal_names_the_rank_and_why():
    argv = HEAD + ["--nnodes", "2", "--node-rank", "1", "--dist-init-addr", "10.0.0.1:20000"]
    why = _multinode.refusal(30000, argv)
    assert why.startswith("the server on port 30000 is rank 1 of a 2-node SGLang server (--nnodes 2 --node-rank 1 "
                          "--dist-init-addr 10.0.0.1:20000): a rank >= 1 serves no API")
    assert "cut over as one group, never host by host" in why and "cutover_multinode_group" in why
    rank0 = _multinode.refusal(30000, HEAD + ["--nnodes", "2"])
    assert "rank 0 of a 2-node" in rank0 and "--dist-init-addr unset" in rank0 and "stopping it ends every rank" in rank0
    assert _multinode.refusal(30000, HEAD) is None


def test_with_the_rank_its_group_gives_a_rank_is_no_refusal_and_another_rank_is():
    """The caller that switches the whole group (the cutover's group mode) says each host's rank: that rank passes,
    another (a host of the group given the wrong rank) or a server on one host does not."""
    argv = HEAD + ["--nnodes", "2", "--node-rank", "1", "--dist-init-addr", "10.0.0.1:20000"]
    assert _multinode.refusal(30000, argv, rank=1) is None
    assert _multinode.refusal(30000, argv, rank=0) == (
        "the server on port 30000 is rank 1 of a 2-node SGLang server (--nnodes 2 --node-rank 1 --dist-init-addr "
        "10.0.0.1:20000), not rank 0 as its group has it")
    assert _multinode.refusal(30000, HEAD, "the unit's command for port", rank=0) == (
        "the unit's command for port 30000 is not one rank of a multi-node SGLang server (no --nnodes above 1), yet it "
        "is to be switched as rank 0 of one")
