"""The double, run as 0.5.15, against what the real 0.5.15 server did on a GPU (tests/conformance/real/0.5.15-h200.json):
the same cases (tests/gpu/real/trace.py) run against the double on loopback with its timings short, and the same
reader (tests/gpu/real/facts.py) turns both traces into facts, compared one by one. The times measured on the real
server (the 120 s of the warm-up's tries, the 5 s crash sleep...) stand in the record's `timings_s`; the double
takes them from its knobs, set short here."""
import json
import os
import subprocess
import sys

import pytest

from tests.conformance.conftest import DOUBLE, ROOT
from tests.helpers import free_port

REAL = ROOT / "tests" / "conformance" / "real" / "0.5.15-h200.json"
TRACE = ROOT / "tests" / "gpu" / "real"
CASES = ("main", "port_taken_sglang", "port_taken_other", "sigterm_before_generate", "sigterm_before_generate_skip",
         "scheduler_kill_loading", "scheduler_kill_ready", "scheduler_kill_then_sigterm", "ipv6_serve")
# short timings; loading lasts past trace.py's kill 3 s after the scheduler appears, the warm-up past a route sweep
KNOBS = {"SGLANG_DOUBLE_VERSION": "0.5.15", "SGLANG_DOUBLE_LOAD_SECONDS": "8", "SGLANG_DOUBLE_WARMUP_SECONDS": "3",
         "SGLANG_DOUBLE_HEALTH_SECONDS": "0.01", "SGLANG_DOUBLE_TOKEN_SECONDS": "0.001",
         "SGLANG_DOUBLE_WATCHDOG_SECONDS": "0.5", "SGLANG_DOUBLE_LOAD_POLL_SECONDS": "1",
         "SGLANG_DOUBLE_LIVENESS_SECONDS": "0.2", "SGLANG_DOUBLE_CRASH_SLEEP_SECONDS": "2",
         "SGLANG_DOUBLE_WARMUP_TRIES": "8", "SGLANG_DOUBLE_WARMUP_RETRY_SECONDS": "0.5"}
# port_taken_other: SIGTERM 0.5 s after the failed bind, alive 0.5, 1 and 1.5 s later (the tries last about 4 s)
CHECKS = "0.5,0.5,1,1.5"


def facts_of(trace):
    sys.path.insert(0, str(TRACE))
    try:
        from facts import facts  # pylint: disable=import-outside-toplevel
    finally:
        sys.path.remove(str(TRACE))
    return facts(trace)[0]


@pytest.fixture(scope="module")
def real():
    return json.loads(REAL.read_text())


@pytest.fixture(scope="module")
def double_trace(tmp_path_factory):
    """trace.py's cases against the double as 0.5.15 (ipv6_serve's server with the model whose first token ends the
    sequence: the empty_generation fault)."""
    work = tmp_path_factory.mktemp("double-trace")
    for model in ("tiny", "tiny-eos"):
        (work / "models" / model).mkdir(parents=True)
    ports = {case: free_port() for case in CASES}
    env = dict(os.environ, PYTHONPATH=str(DOUBLE), **KNOBS)
    proc = subprocess.run(
        [sys.executable, str(TRACE / "trace.py"), "--models", str(work / "models"), "--work", str(work / "run"),
         "--out", str(work / "out"), "--deadline", "90", "--cases", ",".join(CASES), "--ports", json.dumps(ports),
         "--case-env", json.dumps({"ipv6_serve": {"SGLANG_DOUBLE_FAULTS": "empty_generation"}}),
         "--port-taken-checks", CHECKS],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True, timeout=150, check=False)
    assert proc.returncode == 0, proc.stdout
    trace = json.loads((work / "out" / "trace.json").read_text())
    failed = {name: case["error"] for name, case in trace["cases"].items() if "error" in case}
    assert not failed, failed
    return trace


def test_the_record_holds_every_case(real):
    """The record has a fact for each case the double is run through here (none was lost on the GPU)."""
    assert set(real["facts"]) == {
        "routes_loading", "routes_ready", "refused_before_port_open", "tree", "sigterm_after_ready",
        "scheduler_killed_loading", "scheduler_killed_ready", "scheduler_killed_then_sigterm", "port_taken_other",
        "port_taken_sglang", "sigterm_before_generate", "sigterm_before_generate_skip", "ipv6", "empty_generation",
        "sglang_serve_tree"}


FACTS = ("routes_loading", "routes_ready", "refused_before_port_open", "tree", "sglang_serve_tree",
         "sigterm_after_ready", "scheduler_killed_loading", "scheduler_killed_ready", "scheduler_killed_then_sigterm",
         "port_taken_other", "port_taken_sglang", "sigterm_before_generate", "sigterm_before_generate_skip", "ipv6",
         "empty_generation")


@pytest.mark.parametrize("fact", FACTS)
def test_the_double_does_what_the_real_server_did(real, double_trace, fact):
    mine = facts_of(double_trace).get(fact)
    want = real["facts"][fact]
    if isinstance(want, dict):
        assert {k: mine.get(k) if mine else None for k in want} == want, "%s: the double %s, the real server %s" % (
            fact, mine, want)
    else:
        assert mine == want
