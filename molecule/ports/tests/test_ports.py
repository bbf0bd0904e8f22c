"""Two servers on one host, cut over in one run through cutover_ports: each serves from its own unit with its own
settings and record, and the second switch began only once the first unit was ready. Then the other playbooks on
the same host go through both entries: the status of each, the benchmark of each, and last the rollback of each to
its captured command. A bad cutover_ports is refused before anything is touched, naming the entries."""
import json
import os
import subprocess

import pytest

from serving import serves_from_its_unit  # pylint: disable=import-error

ROOT = os.environ["INFEROPS_ROOT"]
INVENTORY = os.environ["MOLECULE_INVENTORY_FILE"]
UNITS = {30000: "sglang-30000.service", 30001: "sglang-second.service"}
pytestmark = pytest.mark.hosts("ports")  # the host `shared` is test_shared_gpu.py's


def playbook(name, *extra, **kwargs):
    p = subprocess.run(["ansible-playbook", "-i", INVENTORY, os.path.join(ROOT, "playbooks", name), "--limit", "ports"]
                       + list(extra),
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True, check=False,
                       env=dict(os.environ, ANSIBLE_NOCOLOR="1"))
    assert p.returncode == kwargs.get("rc", 0), p.stdout[-4000:]
    return p.stdout


def monotonic(host, unit, prop):
    return int(host.check_output("systemctl show -p %s --value %s" % (prop, unit)))


def test_each_server_serves_from_its_own_unit(host):
    serves_from_its_unit(host, "sglang-30000.service", 30000)
    serves_from_its_unit(host, "sglang-second.service", 30001)
    assert host.check_output("pgrep -c -f '[s]glang.launch_server'") == "2"


def test_each_unit_runs_its_own_settings(host):
    first = host.file("/etc/systemd/system/sglang-30000.service").content_string
    second = host.file("/etc/systemd/system/sglang-second.service").content_string
    assert '"--port" "30000"' in first and "--max-running-requests" not in first
    assert '"--port" "30001"' in second and '"--max-running-requests" "32"' in second and '"--base-gpu-id" "1"' in second


def test_each_server_has_its_own_record(host):
    for port, unit in ((30000, "sglang-30000.service"), (30001, "sglang-second.service")):
        record = json.loads(host.file("/var/lib/inferops/cutover/%d/last.json" % port).content_string)
        assert record["action"] == "switch" and str(record["port"]) == str(port) and record["unit"] == unit


def test_one_switch_after_the_other(host):
    """The second unit started after the first was active (ready: the readiness gate holds activation)."""
    first_ready = monotonic(host, "sglang-30000.service", "ActiveEnterTimestampMonotonic")
    second_started = monotonic(host, "sglang-second.service", "ExecMainStartTimestampMonotonic")
    assert 0 < first_ready < second_started


def test_the_ipv6_only_server_is_cut_over_and_asked_on_its_loopback(host):
    """The second server listens on `--host ::`, IPv6 only: its unit runs it so, its readiness gate asks ::1 (on
    127.0.0.1 nothing answers, and the gate would have waited out TimeoutStartSec), and it serves there."""
    unit = host.file("/etc/systemd/system/sglang-second.service").content_string
    assert '"--host" "::"' in unit and "inferops-sglang-ready ::1 30001" in unit
    ask = ("python3 -c \"import sys, urllib.request as u\ntry:\n print(u.urlopen(sys.argv[1], timeout=30).status)\n"
           "except OSError as e:\n print(type(e).__name__)\" %s")
    assert host.check_output(ask % "http://[::1]:30001/health") == "200"
    assert host.check_output(ask % "http://127.0.0.1:30001/health") == "URLError"
    record = json.loads(host.file("/var/lib/inferops/cutover/30001/last.json").content_string)
    assert record["generated"] and record["model"]


def test_status_reports_each_server(host):
    """Each entry's own server and unit (it looked at sglang-30000.service alone)."""
    out = playbook("status.yml")
    for port, unit in UNITS.items():
        main = host.check_output("systemctl show -p MainPID --value %s" % unit)
        assert '"listener": "pid %s, in %s"' % (main, unit) in out, out[-3000:]
    assert "nothing listens on port" not in out


def test_bench_measures_each_server(host):
    playbook("bench.yml", "-e", json.dumps({"bench_concurrencies": [1], "bench_num_prompts": 2, "bench_output_len": 4,
                                            "bench_label": "ports"}))
    for port in UNITS:
        assert host.file("/var/lib/inferops/bench/ports-%d.jsonl" % port).exists


def test_int_entries_are_taken_and_a_duplicate_is_refused_naming_the_entries(host):
    out = playbook("status.yml", "-e", '{"cutover_ports": [30000, 30001]}')
    main = host.check_output("systemctl show -p MainPID --value sglang-second.service")
    assert '"listener": "pid %s, in sglang-second.service"' % main in out, out[-3000:]  # 30001 by its port alone
    out = playbook("cutover.yml", "-e", '{"cutover_ports": [30000, {"port": 30001, "unit_name": "sglang-30000"}]}',
                   rc=2)
    assert ("cutover_ports[0] and cutover_ports[1] have the same unit_name 'sglang-30000': each server has its own "
            "port and its own unit") in out
    for port, unit in UNITS.items():  # nothing was touched
        serves_from_its_unit(host, unit, port)


def test_rollback_takes_each_server_back_to_its_captured_command(host):
    """Last: both servers run their captured commands again, no unit serves."""
    playbook("rollback.yml")
    for port, unit in UNITS.items():
        assert not host.service(unit).is_running and not host.service(unit).is_enabled
        record = json.loads(host.file("/var/lib/inferops/cutover/%d/last.json" % port).content_string)
        assert record["action"] == "rollback", record
    assert host.check_output("pgrep -c -f '[s]glang.launch_server'") == "2"
