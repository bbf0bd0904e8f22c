"""After every case, every host restarted at once: exactly one server serves the port, from the expected unit, never
restarted, and no other enabled unit would fight for the port; status names the unit that holds the port. pytest
runs this file after test_units.py (the states before the restart)."""
import os
import re
import subprocess
import time

import pytest

from restart import restart  # pylint: disable=import-error
from test_units import HEALTH, KIMI, MANAGED, REFUSED, flat, listener, name, servers, serving_units, state

ROOT = os.environ["INFEROPS_ROOT"]
# the unit that serves the port after the host restarts
AFTER_RESTART = dict(dict((h, KIMI) for h in REFUSED), hand=MANAGED, under=MANAGED, named=KIMI, rollback=KIMI)


_restarted = {}


def restart_all():
    """Every host of the scenario restarted at once, the first time a test asks: {host: rc} (one rc for all)."""
    if not _restarted:
        rc = restart(*sorted(AFTER_RESTART))
        _restarted.update((h, rc) for h in AFTER_RESTART)
    return _restarted


def test_after_a_host_restart_one_server_serves_from_the_expected_unit_and_no_other_would_fight(host):
    assert restart_all()[name(host)] == 0
    unit = AFTER_RESTART[name(host)]
    deadline = time.time() + 150
    health = None
    while time.time() < deadline:
        try:
            if state(host, unit, "ActiveState")["ActiveState"] == "active":
                health = host.check_output(HEALTH)
                if health == "200":
                    break
        except Exception:  # pylint: disable=broad-except  # sshd not up yet, or the server still loading
            pass
        time.sleep(1)
    assert health == "200", host.run("systemctl status --no-pager %s; systemctl list-jobs --no-pager; journalctl -b "
                                     "--no-pager -n 40 -u %s" % (unit, unit)).stdout
    time.sleep(3)  # a second unit started at boot would be loading now
    pid, holder = listener(host)
    assert holder == unit and int(state(host, unit, "MainPID")["MainPID"]) == pid
    assert servers(host) == [str(pid)]
    assert state(host, unit, "NRestarts")["NRestarts"] == "0"
    enabled = sorted(u for u, (file_state, active) in serving_units(host).items() if file_state == "enabled")
    assert enabled == [unit]


@pytest.mark.hosts("refuse", "hand")
def test_status_names_every_unit_that_could_serve_the_port_and_warns_when_another_holds_it(host):
    """After the restart: on refuse the operator's unit holds the port (sglang-30000 does not exist), on hand the
    managed unit does (the operator's is disabled)."""
    assert restart_all()[name(host)] == 0
    run = subprocess.run(["ansible-playbook", "-i", os.environ["MOLECULE_INVENTORY_FILE"],
                          os.path.join(ROOT, "playbooks", "status.yml"), "--limit", name(host)],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True, check=False)
    text = re.sub(r"\x1b\[[0-9;]*m", "", run.stdout)
    assert run.returncode == 0, text[-3000:]
    warning = "[WARNING]: port 30000 is served by sglang-kimi.service, not by sglang-30000.service"
    kimi = "sglang-kimi.service (/etc/systemd/system/sglang-kimi.service, "
    if name(host) == "refuse":
        assert warning in text, text[-3000:]
        assert re.search(re.escape(kimi) + r"enabled, active, pid \d+\): holds the port", flat(text)), text[-3000:]
    else:
        assert warning not in text and kimi + "disabled, inactive)" in flat(text), text[-3000:]
        assert re.search(r"sglang-30000\.service \(/etc/systemd/system/sglang-30000\.service, enabled, active, "
                         r"pid \d+\): holds the port", flat(text)), text[-3000:]
