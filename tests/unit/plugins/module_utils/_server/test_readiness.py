"""The start-up phases over real HTTP on loopback, against the SGLang double walking through them."""
import json
import os
import time

import pytest

from ansible_collections.inferops.sglang.plugins.module_utils._server import (
    listeners as _listeners, readiness as _readiness)
from ansible_collections.inferops.sglang.plugins.module_utils._host import procfs as _procfs
from tests.unit.conftest import free_port


def family_of(p):
    """The owner check of a server started here: its own family accepted the connection."""
    return lambda sock: _listeners.peer_problem(sock, pid=p.pid)


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


def test_an_empty_generation_is_a_generation(server):
    """A real model whose first token ends the sequence answers 200 with text "" and one token (0.5.15 on an H200,
    model tiny-eos): the server works, the wait passes; an answer that generated nothing does not."""
    p = server(version="0.5.15", faults="empty_generation")
    res = _readiness.wait(_readiness.Server(p.url), timeout=30, generate=True)
    assert res["generated"] == "" and res["generated_tokens"] == 1
    for body in ({"text": "", "output_ids": [], "meta_info": {"completion_tokens": 0}}, {"error": "x"}, [1]):
        answer = _readiness.Answer(200, json.dumps(body).encode())
        assert _readiness.output_tokens(answer) == 0, body
    assert _readiness.output_tokens(_readiness.Answer(500, b'{"text": "x", "output_ids": [1]}')) == 0
    assert _readiness.output_tokens(_readiness.Answer(200, b'{"text": "", "output_ids": [0]}')) == 1


def test_an_ipv6_only_server_is_waited_for_on_its_loopback(server, spawn):
    """`--host ::` listens on IPv6 only (as a real 0.5.15's uvicorn): the wait at [::1] goes through every phase, and
    the key goes to its own family's connection there; 127.0.0.1 is refused."""
    p = server("--host", "::", "--api-key", "sk-six", version="0.5.15")
    url = p.url.replace("127.0.0.1", "[::1]")
    res = _readiness.wait(_readiness.Server(url, api_key="sk-six", owner=family_of(p)), timeout=30, generate=True)
    assert res["model"] == spawn.marker and res["generated_tokens"] > 0 and res["ready_path"] == "/health"
    assert _readiness.Server(p.url).request("/health").status == 0


def test_v1_models_200_while_loading_is_not_ready(server):
    """A real server answers /v1/models 200 (listing the model) while it is not ready (seen on 0.5.15): the wait asks
    readiness of /health (or /ready) only, so a server stuck in its warm-up is never reported ready."""
    p = server(faults="never_healthy", version="0.5.15")
    s = _readiness.Server(p.url)
    with pytest.raises(_readiness.NotReady, match=r"not ready within 4 s \(still warmup\)") as e:
        _readiness.wait(s, timeout=4, generate=True)
    assert s.request("/v1/models").status == 200 and _readiness.model_names(s.request("/v1/models")) == [p.marker]
    assert s.request("/health").status == 503
    assert e.value.result["ready_path"] is None and "/v1/models" not in e.value.result["endpoints"]


def test_api_key(server, spawn):
    p = server("--api-key", "sk-secret")
    with pytest.raises(_readiness.NotReady, match="401.*give api_key"):
        _readiness.wait(_readiness.Server(p.url), timeout=30)
    res = _readiness.wait(_readiness.Server(p.url, api_key="sk-secret", owner=family_of(p)), timeout=30, generate=True)
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
    """0.5.5-0.5.15 keep /ready behind --api-key (401) or have none (404): readiness is asked of /health. The version
    the server runs is its /server_info's, /get_server_info's on 0.5.5 (no /server_info there), asked with the key;
    nothing else of that answer (the server's arguments, the key among them) comes back."""
    p = server("--api-key", "sk-secret", version=version)
    res = _readiness.wait(_readiness.Server(p.url, api_key="sk-secret", owner=family_of(p)), timeout=30)
    assert res["ready_path"] == "/health" and res["model"] == spawn.marker
    assert res["version"] == version and "sk-secret" not in json.dumps(res)
    assert _readiness.server_version(_readiness.Server(p.url)) is None, "without the key: 401, no version"
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


def no_key_in(requests, key):
    return [r for r in requests if r["authorization"] and key in r["authorization"]]


def test_no_impostor_on_the_port_gets_the_key_of_the_unit(impostor):
    """During a model load the port is free: another user (nobody, another cgroup) binds it. The wait asks it (its
    /ready answers 200), never with the key, and its answer never counts."""
    port = free_port()
    impostor.start(port)
    unit = "sglang-t%d.service" % port
    server = _readiness.Server("http://127.0.0.1:%d" % port, api_key="sk-for-the-unit",
                               owner=lambda sock: _listeners.peer_problem(sock, unit=unit))
    with pytest.raises(_readiness.NotReady, match="not by %s" % unit):
        _readiness.wait(server, timeout=2, gates=[lambda: _listeners.listener_problem(port, unit=unit)])
    answer = server.request("/v1/models")
    assert answer.status is None and answer.error == (
        "the API key was not sent: the connection to port %d was accepted by no process of %s" % (port, unit))
    asked = impostor.requests()
    assert [r["path"] for r in asked[:1]] == ["/ready"], "it was asked, as the port's holder"
    assert no_key_in(asked, "sk-for-the-unit") == []


def test_no_impostor_gets_the_key_of_a_pids_family(impostor, server, spawn):
    """The same for a server known by its pid (a rollback's captured command): here the real one listens elsewhere."""
    p = server("--api-key", "sk-for-the-family")
    port = free_port()
    impostor.start(port)
    imp = _readiness.Server("http://127.0.0.1:%d" % port, api_key="sk-for-the-family", owner=family_of(p))
    assert imp.request("/v1/models").status is None and imp.request("/generate", {"text": "x"}).status is None
    res = _readiness.wait(_readiness.Server(p.url, api_key="sk-for-the-family", owner=family_of(p)), timeout=30)
    assert res["model"] == spawn.marker, "the server's own family gets it"
    assert [r["path"] for r in impostor.requests()] == [], "nothing was asked of the impostor: the key was withheld"


def test_the_units_own_server_gets_the_key(server, spawn, cgroups):
    """A server in the unit's cgroup is the unit's: it gets the key (its /v1/models and /generate need it)."""
    unit = "sglang-t%d.service" % os.getpid()
    p = server("--api-key", "sk-unit", preexec_fn=cgroups.enter(unit))
    s = _readiness.Server(p.url, api_key="sk-unit", owner=lambda sock: _listeners.peer_problem(sock, unit=unit))
    res = _readiness.wait(s, timeout=30, generate=True)
    assert res["model"] == spawn.marker and res["generated"]
    elsewhere = _readiness.Server(p.url, api_key="sk-unit", owner=lambda sock: _listeners.peer_problem(
        sock, unit="another.service"))
    assert elsewhere.request("/v1/models").status is None
