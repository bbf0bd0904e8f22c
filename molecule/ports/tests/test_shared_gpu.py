"""Two small servers on one GPU (`shared`, GPU 0, --mem-fraction-static 0.4 each), cut over in one run through
cutover_ports: [30000, 30001]. Each is the other's neighbour, never a stray: both switches passed their preflight,
each server is served by its own unit, the neighbour lived through the other's switch, and once the host restarts
both units bring their servers back."""
import time

import pytest

from restart import restart  # pylint: disable=import-error
from serving import serves_from_its_unit  # pylint: disable=import-error

pytestmark = pytest.mark.hosts("shared")
UNITS = {30000: "sglang-30000.service", 30001: "sglang-30001.service"}


def test_both_servers_on_one_gpu_are_served_by_their_own_units(host):
    for port, unit in UNITS.items():
        serves_from_its_unit(host, unit, port)
        assert '"--mem-fraction-static" "0.4"' in host.file("/etc/systemd/system/%s" % unit).content_string
    assert host.check_output("pgrep -c -f '[s]glang.launch_server'") == "2"
    # the second server's switch began after the first unit served: the first unit's server, its neighbour on GPU 0
    # then, was not touched (it never restarted, and was not stopped as a stray)
    for unit in UNITS.values():
        assert host.check_output("systemctl show -p NRestarts --value %s" % unit) == "0"
    first = int(host.check_output("systemctl show -p ExecMainStartTimestampMonotonic --value sglang-30000.service"))
    second = int(host.check_output("systemctl show -p ExecMainStartTimestampMonotonic --value sglang-30001.service"))
    assert 0 < first < second


def test_after_a_host_restart_both_units_serve_again(host):
    assert restart("shared") == 0
    deadline = time.time() + 150
    last = None
    while time.time() < deadline:
        try:
            for port, unit in UNITS.items():
                serves_from_its_unit(host, unit, port)
            break
        except Exception as e:  # pylint: disable=broad-except  # sshd not up yet, or a server still loading
            last = e
            time.sleep(1)
    else:
        raise AssertionError("both units did not serve within 150 s of the restart: %s\n%s" % (last, host.run(
            "systemctl status --no-pager %s; journalctl -b --no-pager -n 40" % " ".join(UNITS.values())).stdout))
    assert host.check_output("pgrep -c -f '[s]glang.launch_server'") == "2"
