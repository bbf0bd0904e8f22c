"""After the rolling cutover: which batches ran, each host's real state, what the balancer routed, what the
clients got. Expected: batch 1 (fleet1-fleet4, fleet2 fails: 1 of 4 = 25 %, not more than 25 %) goes on; batch 2 (fleet5, fleet6;
fleet6 fails: 50 %) stops the run; batch 3 (fleet7, fleet8) never starts."""
import json
import os
import re

import pytest
from serving import serves_from_its_unit  # pylint: disable=import-error

FLEET = os.path.join(os.environ.get("MOLECULE_EPHEMERAL_DIRECTORY", "/nonexistent"), "fleet")
UNIT = "sglang-30000.service"
STATE = "/var/lib/inferops/cutover/30000"
MIGRATED, ROLLED_BACK, UNTOUCHED = ["fleet1", "fleet3", "fleet4", "fleet5"], ["fleet2", "fleet6"], ["fleet7", "fleet8"]
READY = ("python3 -c \"import urllib.request as u; print(u.urlopen('http://127.0.0.1:30000/health', timeout=30).status)\"")


def lines(name):
    with open(os.path.join(FLEET, name)) as f:
        return [json.loads(line) for line in f if line.strip()]


def name(host):
    return host.backend.get_hostname()


def test_batches_ran_and_stopped_as_max_fail_percentage_says():
    with open(os.path.join(FLEET, "cutover.log")) as f:
        log = re.sub(r"\x1b\[[0-9;]*m", "", f.read())  # molecule may force colours
    recap = dict((m.group(1), m.group(2)) for m in re.finditer(r"^(fleet\d)\s+: (.*)$", log, re.M))
    assert sorted(recap) == sorted(MIGRATED + ROLLED_BACK), log[-6000:]  # fleet7 and fleet8 never started
    for h in MIGRATED:
        assert "failed=0" in recap[h], recap[h]
    for h in ROLLED_BACK:
        # one failure, the last task's "did not serve"; what failed before it was rescued (the switch's step, the
        # wait and verify stage), how many blocks that took is the role's business
        assert "failed=1" in recap[h] and re.search(r"rescued=[1-9]", recap[h]), recap[h]
    plays = [m.start() for m in re.finditer(r"^PLAY \[Cut over SGLang servers to systemd\]", log, re.M)]
    assert len(plays) == 2  # batches 1 and 2; there is no third
    rolled = re.findall(r"^fatal: \[(fleet\d)\]: FAILED! =>[^\n]*ROLLED BACK: the captured command serves", log, re.M)
    assert sorted(rolled) == ROLLED_BACK, log[-6000:]


@pytest.mark.hosts(*MIGRATED)
def test_migrated_hosts_serve_from_their_unit(host):
    serves_from_its_unit(host)
    assert host.check_output(READY) == "200"


@pytest.mark.hosts(*ROLLED_BACK)
def test_rolled_back_hosts_serve_their_old_command_again(host):
    assert not host.service(UNIT).is_running and not host.service(UNIT).is_enabled
    pid = host.check_output("pgrep -f '[s]glang.launch_server.*--port 30000' | head -1")
    assert host.check_output("pgrep -c -f '[s]glang.launch_server.*--port 30000'") == "1"
    assert UNIT not in host.file("/proc/%s/cgroup" % pid).content_string
    assert host.check_output(READY) == "200"
    assert json.loads(host.file(STATE + "/last.json").content_string)["action"] == "rollback"


@pytest.mark.hosts(*UNTOUCHED)
def test_hosts_of_the_batch_that_never_started_are_untouched(host):
    assert not host.file("/etc/systemd/system/" + UNIT).exists
    assert not host.file(STATE + "/switch.json").exists
    assert host.check_output("pgrep -c -f '[s]glang.launch_server.*--port 30000'") == "1"
    assert host.check_output(READY) == "200"


@pytest.mark.hosts(*(MIGRATED + ROLLED_BACK))
def test_no_host_was_stopped_while_the_balancer_still_sent_it_traffic(host):
    h = name(host)
    events = lines("balancer.jsonl")
    admin = [e for e in events if e["event"] in ("disable", "enable") and e["backend"] == h]
    assert [e["event"] for e in admin] == ["disable", "enable"]
    out, back = admin[0]["t"], admin[1]["t"]
    events_on_host = [json.loads(x) for x in host.file("/root/double-state.jsonl").content_string.splitlines() if x]
    stopped = [e["time"] for e in events_on_host if e["event"] == "sigterm"][0]  # the old server's stop
    routed = [e for e in events if e["event"] == "route" and e["backend"] == h]
    assert [e for e in routed if e["start"] < out]  # it did serve the clients before
    assert not [e for e in routed if out <= e["start"] < back]  # no request sent while out of the pool
    assert all(e["end"] < stopped for e in routed if e["start"] < out)  # all done before the stop
    assert out < stopped < back


def test_the_clients_never_saw_an_error():
    answers = lines("client.jsonl")
    assert len(answers) > 100
    assert [a for a in answers if a["status"] != 200] == []
    assert set(a["backend"] for a in answers) == set(MIGRATED + ROLLED_BACK + UNTOUCHED)
