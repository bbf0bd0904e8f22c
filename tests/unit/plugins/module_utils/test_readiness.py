"""The start-up phases over real HTTP on loopback, against the SGLang double walking through them."""
import time

import pytest

from ansible_collections.inferops.sglang.plugins.module_utils import _procfs, _readiness


def test_walks_the_phases_and_sees_ready_at_once(server, spawn):
    p = server()
    res = _readiness.wait(_readiness.Server(p.url), timeout=30)
    seen = time.time()
    assert res["ready_path"] == "/ready"
    assert res["model"] == spawn.marker
    assert res["phases"]["loading"] >= 0.9 and res["phases"]["warmup"] >= 0.4
    assert seen - p.events()["ready"] < 0.25, "readiness seen within 0.25 s of the server turning ready"


def test_health_only_servers(server, spawn):
    p = server(version="0.5.15")
    res = _readiness.wait(_readiness.Server(p.url), timeout=30, generate=True)
    assert res["ready_path"] == "/health"
    assert res["endpoints"]["/health"]["seconds"] >= 1.0, "the real /health takes a generation's time"
    assert res["generated"]


def test_api_key(server, spawn):
    p = server("--api-key", "sk-secret")
    with pytest.raises(_readiness.NotReady, match="401.*give api_key"):
        _readiness.wait(_readiness.Server(p.url), timeout=30)
    res = _readiness.wait(_readiness.Server(p.url, api_key="sk-secret"), timeout=30, generate=True)
    assert res["model"] == spawn.marker and res["generated"]


def test_fails_fast_when_the_process_dies(server):
    p = server(faults="crash_during_load", load_seconds=2)
    ident = (p.pid, _procfs.starttime(p.pid))
    t0 = time.monotonic()
    with pytest.raises(_readiness.NotReady, match="exited") as e:
        _readiness.wait(_readiness.Server(p.url), timeout=60, check_every=0.2,
                        checks=[lambda: None if _procfs.is_alive(ident) else "pid %d exited" % p.pid])
    assert time.monotonic() - t0 < 3
    assert e.value.result["phase"] == "loading"


def test_timeout_names_the_phase(server):
    # long enough for the double to start and load (1 s) on a loaded machine: the phase named is warm-up
    p = server(faults="never_healthy")
    with pytest.raises(_readiness.NotReady, match="not ready within 5 s .still warmup."):
        _readiness.wait(_readiness.Server(p.url), timeout=5)


def test_does_not_hammer_a_loading_server(server):
    """One look per poll interval at most, one request at a time: never more looks than intervals elapsed."""
    p = server(version="0.5.15", warmup_seconds="2")
    res = _readiness.wait(_readiness.Server(p.url), timeout=30)
    assert res["phases"]["warmup"] >= 2
    assert res["attempts"] <= res["ready_after"] / _readiness.POLL + 2


def test_bad_url():
    with pytest.raises(ValueError, match="not an http"):
        _readiness.Server("localhost:30000")


@pytest.mark.parametrize("version", ["0.5.5", "0.5.9", "0.5.15"])
def test_ready_path_behind_the_key_is_health(server, spawn, version):
    """0.5.5-0.5.15 keep /ready behind --api-key (401) or have none (404): readiness is asked of /health."""
    p = server("--api-key", "sk-secret", version=version)
    res = _readiness.wait(_readiness.Server(p.url, api_key="sk-secret"), timeout=30)
    assert res["ready_path"] == "/health" and res["model"] == spawn.marker
    assert _readiness.ready_path_of(_readiness.Answer(401)) == "/health"
    assert _readiness.ready_path_of(_readiness.Answer(404)) == "/health"
    assert _readiness.ready_path_of(_readiness.Answer(503)) == "/ready"


def test_gates_hold_the_answer_back(server):
    """A 200 counts only once every gate passes (the listener is the server's own, the unit is active)."""
    p = server()
    opened = []
    t0 = time.monotonic()

    def gate():
        if time.monotonic() - t0 < 4:
            return "the unit is still activating"
        opened.append(time.monotonic())
        return None

    res = _readiness.wait(_readiness.Server(p.url), timeout=30, gates=[gate])
    assert opened and res["ready_after"] >= 4 and "awaiting" not in res
    with pytest.raises(_readiness.NotReady, match=r"still warmup; awaiting: held"):
        _readiness.wait(_readiness.Server(p.url), timeout=1, gates=[lambda: "held"])
