"""Two servers on one host, cut over in one run through cutover_ports: each serves from its own unit with its own
settings and record, and the second switch began only once the first unit was ready."""
import json

from serving import serves_from_its_unit  # pylint: disable=import-error


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
