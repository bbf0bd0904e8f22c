"""Several nodes: the double's ranks, run as each version (two real process trees meeting over TCP on loopback),
agree with that version's wheel. Every expected value is read from the wheel (realwheel.py, "several nodes")."""
import json
import signal
import subprocess
import sys
import time

import pytest

from tests.conformance.conftest import double_env, get, tree, wait_for
from tests.helpers import free_port

KEY = "sk-conformance"
TP = 4  # over two nodes: two schedulers a node


class Rank:
    """One rank of a two-node `--tp 4` server of the double as `version`, with its own port, log and state file."""

    def __init__(self, tmp, version, rank, addr, *extra, **knobs):
        self.rank = rank
        self.port = free_port()
        self.state = tmp / ("state-%d.jsonl" % rank)
        self.log = tmp / ("rank-%d.log" % rank)
        (tmp / "model").mkdir(exist_ok=True)
        argv = [sys.executable, "-m", "sglang.launch_server", "--model-path", str(tmp / "model"), "--host", "127.0.0.1",
                "--port", str(self.port), "--tp", str(TP), "--nnodes", "2", "--node-rank", str(rank),
                "--dist-init-addr", addr, *extra]
        env = double_env(version, SGLANG_DOUBLE_STATE_FILE=str(self.state),
                         **{"SGLANG_DOUBLE_" + k.upper(): str(v) for k, v in knobs.items()})
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)

    def events(self):
        return [json.loads(line)["event"] for line in self.state.read_text().splitlines()] if self.state.exists() else []

    def titles(self):
        return sorted(cmd for dummy, cmd in tree(self.proc.pid).values() if cmd.startswith("sglang::"))

    def stop(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture
def ranks(tmp_path, version):
    """start(rank, *extra_args, **knobs) -> Rank; every rank of one test meets at the same --dist-init-addr."""
    addr = "127.0.0.1:%d" % free_port()
    started = []

    def start(rank, *extra, **knobs):
        r = Rank(tmp_path, version, rank, addr, *extra, **knobs)
        started.append(r)
        return r

    yield start
    for r in started:
        r.stop()


def up(r0, r1):
    """Both ranks serving: rank 0's API healthy, rank 1's dummy health answering."""
    wait_for(lambda: get(r0.port, "/health") == 200, timeout=30)
    wait_for(lambda: get(r1.port, "/ping") == 200, timeout=30)


def test_the_double_names_the_wheels_dummy_routes(wheel, version):
    out = subprocess.run([sys.executable, "-c", "import json; from sglang._double.nodes import DUMMY_ROUTES; "
                          "print(json.dumps(DUMMY_ROUTES))"], env=double_env(version), stdout=subprocess.PIPE,
                         universal_newlines=True, check=True).stdout
    assert set(json.loads(out)) == wheel.dummy_health_routes()[0]


def test_rank_1_serves_only_the_dummy_health_and_runs_only_its_schedulers(wheel, ranks):
    paths, guarded = wheel.dummy_health_routes()
    block = wheel.follower_block()
    assert block["dummy_health"], "engine.py:%d launches the dummy health server" % block["line"]
    assert wheel.tp_rank_range_per_node(), "engine.py gives each node its share of the TP ranks"
    r0, r1 = ranks(0, "--api-key", KEY), ranks(1, "--api-key", KEY)
    up(r0, r1)
    for path in sorted(paths):
        assert get(r1.port, path) == 200, path  # without the key: the dummy app has no middleware
    assert not guarded
    api = sorted(p for p, methods in wheel.routes().items() if "GET" in methods and p not in paths
                 and "{" not in p)[:12] + ["/v1/models"]
    for path in api:
        assert get(r1.port, path) == 404, "%s is rank 0's API, not on rank 1" % path
    assert get(r0.port, "/v1/models", KEY) == 200
    # tp_size_per_node * (node_rank % nnodes_per_tp_group): rank 1 of --tp 4 over 2 nodes holds TP ranks 2 and 3;
    # returning before the detokenizer's launch, it runs none
    expected = ["sglang::scheduler_TP%d" % i for i in range(TP // 2, TP)]
    if not block["returns"]:
        expected.append("sglang::detokenizer")
    assert r1.titles() == sorted(expected)


def test_sigterm_on_rank_1(wheel, ranks):
    ignores = wheel.follower_block()["sigterm_handler"]
    r0, r1 = ranks(0), ranks(1)
    up(r0, r1)
    r1.proc.send_signal(signal.SIGTERM)
    if ignores:
        time.sleep(1.5)
        assert r1.proc.poll() is None, "the wheel installs a SIGTERM handler on rank >= 1: it waits for rank 0"
        assert get(r1.port, "/health") == 200 and get(r0.port, "/health") == 200
    else:
        assert r1.proc.wait(timeout=10) == -signal.SIGTERM, "no handler on rank >= 1: SIGTERM ends it"


def test_stopping_rank_0_ends_rank_1(wheel, ranks):
    broadcast = wheel.shutdown_broadcast()
    r0, r1 = ranks(0), ranks(1)
    up(r0, r1)
    r0.proc.send_signal(signal.SIGTERM)
    rc = r1.proc.wait(timeout=30)
    r0.proc.wait(timeout=30)
    if broadcast:
        assert "shutdown_broadcast" in r0.events() and "shutdown_received" in r1.events()
        # after its schedulers ended: 0.5.23 returns from launch_server, earlier ones fail the API's lifespan
        assert rc == (0 if wheel.follower_returns_from_launch_server() else 3)
    else:
        assert "shutdown_broadcast" not in r0.events() and "peer_lost" in r1.events()
        assert rc == -signal.SIGKILL


def test_a_missing_rank_keeps_rank_0_loading_until_dist_timeout(wheel, ranks):
    assert wheel.dist_timeout_passed(), "the schedulers' init_process_group takes --dist-timeout"
    t0 = time.monotonic()
    r0 = ranks(0, "--dist-timeout", "2", dist_timeout_seconds=600)
    rc = r0.proc.wait(timeout=30)
    assert time.monotonic() - t0 >= 2
    assert "rendezvous_timeout" in r0.events() and "warmup" not in r0.events(), "its port never opened"
    assert rc == (-signal.SIGKILL if wheel.scheduler_exception_sigquits_parent() else 1)


def test_a_rank_that_dies_takes_the_other_down(wheel, ranks):
    r0, r1 = ranks(0, crash_sleep_seconds=0.2), ranks(1)
    up(r0, r1)
    r1.proc.kill()
    rc = r0.proc.wait(timeout=15)
    assert "peer_lost" in r0.events()
    assert rc == (-signal.SIGKILL if wheel.scheduler_exception_sigquits_parent() else 1)
