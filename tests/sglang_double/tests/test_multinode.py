"""Several nodes: two doubles on loopback as the two ranks of one server (`--nnodes 2 --node-rank 0|1
--dist-init-addr 127.0.0.1:PORT`), each a real process tree, meeting over TCP."""
import signal
import time

import pytest

from tests.helpers import free_port

from .conftest import alive, wait_for


@pytest.fixture
def group(double, tmp_path):
    """start(rank, version=..., **knobs): one rank of a two-node, --tp 4 server meeting at one address."""
    addr = "127.0.0.1:%d" % free_port()

    def start(rank, *extra, **knobs):
        args = ["--nnodes", "2", "--node-rank", str(rank), "--dist-init-addr", addr, *extra]
        return double(args=args, tp=4, tmp=tmp_path / ("rank%d" % rank), **knobs)

    return start


def ready_follower(d, timeout=20):
    wait_for(lambda: d.get("/ping")[0] == 200, timeout)


def test_rank_0_loads_until_rank_1_joins_and_each_runs_its_share(group):
    r0 = group(0)
    time.sleep(1.5)  # three times the load time: alone, rank 0 is still loading
    assert r0.get("/health")[0] == 0 and r0.proc.poll() is None
    r1 = group(1)
    r0.wait_ready(timeout=20)
    ready_follower(r1)
    assert sorted(r0.titled()) == ["sglang::detokenizer", "sglang::scheduler_TP0", "sglang::scheduler_TP1"]
    assert sorted(r1.titled()) == ["sglang::scheduler_TP2", "sglang::scheduler_TP3"], "no tokenizer, no detokenizer"
    for path in ("/health", "/health_generate", "/ping"):
        assert r1.get(path)[0] == 200, path
    for path in ("/v1/models", "/model_info", "/get_model_info", "/server_info", "/ready", "/metrics"):
        assert r1.get(path)[0] == 404, path
    assert r1.get("/generate", method="POST", body=b"{}")[0] == 404
    assert r1.get("/health", method="POST", body=b"{}")[0] == 405
    assert r0.get("/v1/models")[0] == 200


def test_a_missing_rank_keeps_rank_0_loading_until_the_timeout_then_it_sigkills_itself(group):
    t0 = time.monotonic()
    r0 = group(0, dist_timeout_seconds=2)
    kids = wait_for(lambda: len(r0.titled()) == 3 and list(r0.titled().values()))
    assert r0.proc.wait(timeout=20) == -signal.SIGKILL
    assert time.monotonic() - t0 >= 2.0, "rank 0 waited the timeout for the missing rank"
    assert "Timed out after 2 seconds waiting for clients. 1/2 clients joined." in r0.logtext()
    assert "rendezvous_timeout" in r0.events() and "warmup" not in r0.events()
    wait_for(lambda: not any(alive(p) for p in kids), timeout=5)


def test_dist_timeout_on_the_command_line_wins_over_the_knob(group):
    r1 = group(1, "--dist-timeout", "1", dist_timeout_seconds=600)
    assert r1.proc.wait(timeout=20) == -signal.SIGKILL
    assert "The client socket has timed out after 1000ms" in r1.logtext()


def test_0_5_23_rank_1_ignores_sigterm_and_stopping_rank_0_ends_both(group):
    r0, r1 = group(0), group(1)
    r0.wait_ready(timeout=20)
    ready_follower(r1)
    kids = list(r1.titled().values())
    r1.proc.send_signal(signal.SIGTERM)
    time.sleep(1.0)
    assert r1.proc.poll() is None and r1.get("/health")[0] == 200
    assert "waiting for the rank-0 ShutdownReq broadcast" in r1.logtext()
    r0.proc.send_signal(signal.SIGTERM)
    assert r0.proc.wait(timeout=15) == 0
    assert r1.proc.wait(timeout=15) == 0
    assert "shutdown_received" in r1.events()
    wait_for(lambda: not any(alive(p) for p in kids), timeout=5)


# A SIGTERM to one rank of a ready two-node server, per version: (version, the rank signalled, its exit, the other
# rank's exit, an event the run must log, one it must not)
SIGTERM_CASES = [
    ("0.5.15", 0, -signal.SIGKILL, 3, ("r0", "shutdown_broadcast"), None),   # the broadcast; rank 1 exits 3
    ("0.5.9", 1, -signal.SIGTERM, -signal.SIGKILL, ("r0", "peer_lost"), None),  # rank 0 dies of the lost peer
    ("0.5.5", 0, -signal.SIGKILL, -signal.SIGKILL, ("r1", "peer_lost"), ("r0", "shutdown_broadcast")),  # none sent
]


@pytest.mark.parametrize("version, signalled, its_exit, other_exit, logged, not_logged", SIGTERM_CASES,
                         ids=[c[0] for c in SIGTERM_CASES])
def test_sigterm_to_one_rank_ends_both_as_the_version_does(group, version, signalled, its_exit, other_exit, logged,
                                                           not_logged):
    ranks = {"r0": group(0, version=version), "r1": group(1, version=version)}
    ranks["r0"].wait_ready(timeout=20)
    ready_follower(ranks["r1"])
    hit, other = ranks["r%d" % signalled], ranks["r%d" % (1 - signalled)]
    hit.proc.send_signal(signal.SIGTERM)
    assert hit.proc.wait(timeout=20) == its_exit
    assert other.proc.wait(timeout=15) == other_exit
    assert logged[1] in ranks[logged[0]].events()
    assert not not_logged or not_logged[1] not in ranks[not_logged[0]].events()
    if version == "0.5.15":
        assert "shutdown_received" in ranks["r1"].events()


def test_rank_1_killed_while_loading_ends_rank_0_at_once(group):
    r0, r1 = group(0, load_seconds=30), group(1, load_seconds=30)
    wait_for(lambda: "group_formed" in r0.events() and "group_formed" in r1.events(), timeout=20)
    kids = list(r0.titled().values())
    r1.proc.kill()
    assert r0.proc.wait(timeout=5) == -signal.SIGKILL
    assert "peer_lost" in r0.events() and r0.get("/health")[0] == 0
    wait_for(lambda: not any(alive(p) for p in kids), timeout=5)


def test_0_5_23_rank_1_still_dies_of_sigterm_while_loading(group):
    """Its SIGTERM handler is installed once its schedulers are ready (engine.py:1259-1273, after wait_for_ready)."""
    r1 = group(1)
    wait_for(lambda: "rendezvous" in r1.events(), timeout=20)
    r1.proc.send_signal(signal.SIGTERM)
    assert r1.proc.wait(timeout=5) == -signal.SIGTERM
