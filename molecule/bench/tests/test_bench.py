"""The gate on the hosts: the same service kept with its numbers recorded; the slower one rolled back."""
import json

import pytest

STATE = "/var/lib/inferops/cutover/30000"


def record(host):
    return json.loads(host.file(STATE + "/last.json").content_string)


def listener_unit(host):
    pid = host.check_output("ss -Htlnp 'sport = :30000' | grep -o 'pid=[0-9]*' | head -1 | cut -d= -f2")
    return pid, "sglang-30000.service" in host.file("/proc/%s/cgroup" % pid).content_string


@pytest.mark.hosts("gate_pass")
def test_same_service_passes_and_its_numbers_are_recorded(host):
    dummy, by_unit = listener_unit(host)
    assert by_unit
    rec = record(host)
    assert rec["action"] == "switch"
    assert [r["concurrency"] for r in rec["bench"]] == [1, 4]
    for row in rec["bench"]:
        assert row["baseline"] > 0 and row["service"] > 0 and row["change_pct"] > -25
    assert "throughput (output tok/s" in host.file(STATE + "/last.md").content_string
    rows = host.file("/var/lib/inferops/bench/service-30000.jsonl").content_string.splitlines()
    assert [json.loads(r)["max_concurrency"] for r in rows] == [1, 4]


@pytest.mark.hosts("gate_trip")
def test_slower_service_trips_the_gate_and_the_old_server_serves_again(host):
    pid, by_unit = listener_unit(host)
    assert not by_unit
    assert "SGLANG_DOUBLE_TOKEN_SECONDS=0.005" in host.file("/proc/%s/environ" % pid).content_string.split("\0")
    rec = record(host)
    assert rec["action"] == "rollback" and "slower than the old server" in rec["failure"]
    assert host.check_output("systemctl is-enabled sglang-30000.service || true") == "disabled"


def test_the_client_never_ran_as_root(host):
    """The venv's .pth logged the uid of every interpreter of it: each run of sglang.bench_serving (and the look for
    it) ran as nobody, the venv being root's; the server and the switch's probes, root's, are not the client."""
    lines = [line.split(" ", 1) for line in host.file("/tmp/inferops-pth-log").content_string.splitlines()]
    client = [uid for uid, argv in lines if "--backend sglang" in argv or "sglang.bench_serving" in argv]
    assert client and set(client) == {"65534"}, lines
