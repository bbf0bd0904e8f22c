"""One SGLang server on two hosts (rank 0 on mn0, rank 1 on mn1), cut over as one group by the playbooks run from the
controller: what each run said (its output, kept by converge.yml), then what the hosts hold once both restarted."""
import json
import os
import re
import time

import pytest

from serving import SERVER, serves_from_its_unit  # pylint: disable=import-error
from reference import record_fields  # pylint: disable=import-error

OUT = os.environ["MOLECULE_EPHEMERAL_DIRECTORY"]
UNIT = "sglang-30000.service"
HEALTH = ("python3 -c \"import urllib.request as u; print(u.urlopen('http://127.0.0.1:30000/health', timeout=30)"
          ".status)\"")
RANK = {"mn0": 0, "mn1": 1}


def output(name):
    with open(os.path.join(OUT, name + ".out")) as f:
        return re.sub(r"\x1b\[[0-9;]*m", "", f.read())


def rc(text):
    return int(re.findall(r"^rc=(\d+)$", text, re.M)[-1])


def recap(text):
    """{host: {ok, changed, failed, ...}} of the run's PLAY RECAP."""
    return dict((m.group(1), dict((k, int(v)) for k, v in re.findall(r"(\w+)=(\d+)", m.group(2))))
                for m in re.finditer(r"^(mn\d)\s+: (.*)$", text, re.M))


def failures(text):
    return [line for line in text.splitlines() if line.startswith(("fatal:", "failed:"))]


def name(host):
    return host.backend.get_hostname()


def test_check_mode_shows_the_group_s_order_and_touches_nothing():
    text = output("check")
    assert rc(text) == 0, failures(text) or text[-3000:]
    assert "kimi: rank 0 of 2 (the API); drained and stopped first, its stop ends the other ranks" in text
    assert "kimi: rank 1 of 2 (schedulers and a dummy health check only); stopped once rank 0 is" in text
    assert "check mode: nothing was changed" in text
    assert text.count('"would switch: ') == 2, "each rank's plan"  # touching nothing: the next run switches them
    assert all(r["failed"] == 0 for r in recap(text).values()), recap(text)


def test_the_cutover_switches_both_ranks_rank_0_first_then_both_start():
    text = output("cutover")
    assert rc(text) == 0, failures(text) or text[-3000:]
    assert sorted(recap(text)) == ["mn0", "mn1"] and all(r["failed"] == 0 for r in recap(text).values()), recap(text)


def test_a_rerun_changes_nothing():
    text = output("rerun")
    assert rc(text) == 0, failures(text) or text[-3000:]
    assert all(r["changed"] == 0 for r in recap(text).values()), recap(text)
    assert "kimi: every rank runs its sglang-30000.service: nothing to switch" in text


def test_status_names_each_host_s_rank():
    text = " ".join(output("status").split())
    assert rc(output("status")) == 0
    assert "rank 0 of a 2-node server (--dist-init-addr 10.88.210.1:20000, group kimi): the server's API" in text
    assert "rank 1 of a 2-node server (--dist-init-addr 10.88.210.1:20000, group kimi): its /health is a dummy check" in text


@pytest.mark.hosts("mn1")
def test_rank_0_s_stop_ended_rank_1_s_server_by_its_shutdown_not_by_a_lost_peer(host):
    """Each cutover drained rank 0 and let it end on its own: its shutdown reached rank 1, whose server (launched by
    hand, or by a rollback, its output in the same log) ended with it, and never found its peer gone."""
    log = host.file("/root/sglang.log").content_string
    assert "Scheduler or DataParallelController terminated with 0" in log, log[-3000:]
    assert "Connection closed by peer" not in log, log[-3000:]


def test_the_rollback_on_purpose_brings_every_rank_s_captured_command_back():
    text = output("rollback")
    assert rc(text) == 0, failures(text) or text[-3000:]
    assert all(r["failed"] == 0 for r in recap(text).values()), recap(text)


def test_rank_1_killed_while_it_loads_fails_fast_and_rolls_back_both_hosts():
    """Rank 1's unit is SIGKILLed in a 40 s load, once the group formed: rank 0 loses its peer at once, its wait fails
    on that (not at its timeout, nor once loaded), and both hosts go back to their captured commands."""
    text = output("fault")
    assert rc(text) == 2, text[-3000:]
    fatal = [line for line in failures(text) if "ROLLED BACK: every rank runs its captured command again" in line]
    assert sorted(re.findall(r"^fatal: \[(mn\d)\]", "\n".join(fatal), re.M)) == ["mn0", "mn1"], failures(text)
    assert not any("not ready within" in line for line in fatal), fatal
    # the group's rollback: rank 0's unit stopped, then every other rank's, before any rank's captured command starts (a
    # unit that its Restart= started again meets the captured commands at --dist-init-addr: rank 1's joins it, and ends
    # with it)
    order = [text.find("TASK [inferops.sglang.cutover : Rollback - " + task) for task in (
        "rank 0's unit stopped first", "every other rank's unit stopped", "stop the unit, start what served before")]
    assert -1 not in order and order == sorted(order), order
    waits = [json.loads(line.split("=> ", 1)[1]) for line in failures(text)
             if line.startswith("fatal: [mn0]") and '"wait_seconds"' in line]
    assert waits and waits[0]["wait_failed"] and waits[0]["wait_seconds"] < 40, waits or failures(text)


@pytest.mark.hosts("mn1")
def test_rank_1_was_killed_while_it_loaded(host):
    assert host.file("/root/killed.txt").content_string.startswith("killed ")


def wait_served(host, deadline):
    health = None
    while time.time() < deadline:
        try:
            if host.check_output("systemctl show -p ActiveState --value %s" % UNIT) == "active":
                health = host.check_output(HEALTH)
                if health == "200":
                    return health
        except Exception:  # pylint: disable=broad-except  # sshd not up yet, or the server still loading
            pass
        time.sleep(1)
    return health


def test_after_both_hosts_restarted_the_group_serves_from_its_units(host):
    """The last cutover ran; then both hosts restarted at once: every rank's unit starts at boot, the ranks meet, and
    rank 0's API serves from its unit; one server on each host, from its unit, never restarted."""
    deadline = time.time() + 180
    assert wait_served(host, deadline) == "200", host.run(
        "systemctl status --no-pager %s; journalctl -b --no-pager -n 40 -u %s" % (UNIT, UNIT)).stdout
    if RANK[name(host)] == 0:
        serves_from_its_unit(host)
    assert host.check_output("pgrep -c -f '%s.*--port 30000'" % SERVER) == "1"
    assert host.check_output("systemctl show -p NRestarts --value %s" % UNIT) == "0"
    assert host.service(UNIT).is_enabled


def test_each_rank_s_unit_fits_its_role(host):
    unit = host.file("/etc/systemd/system/" + UNIT).content_string
    assert "StartLimitIntervalSec=0" in unit
    assert "--node-rank\" \"%d\"" % RANK[name(host)] in unit
    if RANK[name(host)] == 0:
        assert "ExecStartPost=" in unit and "TimeoutStopSec=20" in unit and "Restart=on-failure" in unit
    else:
        assert "ExecStartPost=" not in unit and "TimeoutStopSec=15" in unit and "Restart=always" in unit


def test_each_host_keeps_its_record_with_the_group_s_part(host):
    last = json.loads(host.file("/var/lib/inferops/cutover/30000/last.json").content_string)
    group = last["group"]
    assert group["name"] == "kimi" and group["nnodes"] == 2 and group["rank"] == RANK[name(host)]
    assert group["leader"] == "mn0" and [r["host"] for r in group["ranks"]] == ["mn0", "mn1"]
    assert group["stop_began_at"] and last["downtime_switch_sec"] > 0
    assert record_fields.undocumented(last, record_fields.documented()["cutover"]) == []  # docs/record.md has it all
    report = host.file("/var/lib/inferops/cutover/30000/last.md").content_string
    assert "- group: kimi, rank %d of 2 (rank 0 on mn0)" % RANK[name(host)] in report
