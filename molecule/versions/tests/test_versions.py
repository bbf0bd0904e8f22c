"""After the cutover on every SGLang version behind an API key: the unit is active (not activating) and stays so
well past the readiness gate's looks, without a restart, serving from its own process; the console-script server
runs the same entry point under the unit. Where a scheduler was SIGKILLed while the new service loaded, the old
command serves again and the record says why."""
import json
import os
import time

import pytest
import yaml
from serving import UNIT, serves_from_its_unit  # pylint: disable=import-error

SCENARIO = os.environ.get("MOLECULE_SCENARIO_DIRECTORY", os.path.dirname(os.path.dirname(__file__)))
V = yaml.safe_load(open(os.path.join(SCENARIO, "vars", "scenario.yml")))
STATE = "/var/lib/inferops/cutover/30000"
MODELS = ("python3 -c 'import sys, urllib.request as u; r = u.Request(\"http://127.0.0.1:30000/v1/models\"); "
          "r.add_header(\"Authorization\", \"Bearer \" + sys.argv[1]); print(u.urlopen(r, timeout=30).status)' %s")


def name(host):
    return host.backend.get_hostname()


def show(host, *props):
    out = host.check_output("systemctl show %s --property=%s" % (UNIT, ",".join(props)))
    return dict(line.split("=", 1) for line in out.splitlines())


@pytest.mark.hosts("v055", "v059", "v0515", "v0523")
def test_the_unit_is_active_and_stays_active(host):
    first = show(host, "ActiveState", "SubState", "NRestarts", "ActiveEnterTimestampMonotonic", "MainPID")
    assert (first["ActiveState"], first["SubState"]) == ("active", "running"), first
    time.sleep(2)  # twenty of the gate's looks (0.1 s each) and more
    then = show(host, "ActiveState", "NRestarts", "ActiveEnterTimestampMonotonic", "MainPID")
    assert then["ActiveState"] == "active" and then["NRestarts"] == "0"
    assert then["ActiveEnterTimestampMonotonic"] == first["ActiveEnterTimestampMonotonic"]
    assert then["MainPID"] == first["MainPID"]
    serves_from_its_unit(host)
    assert host.check_output(MODELS % V["api_key"]) == "200"
    last = json.loads(host.file(STATE + "/last.json").content_string)
    assert last["action"] == "switch" and last["model"] and last["load_sec"] is not None


@pytest.mark.hosts("v0515")
def test_the_console_script_server_keeps_its_entry_point(host):
    unit = host.file("/etc/systemd/system/" + UNIT).content_string
    assert '"/opt/sglang/venv/bin/sglang" "serve"' in unit, unit
    main = host.check_output("systemctl show -p MainPID --value %s" % UNIT)
    assert "/opt/sglang/venv/bin/sglang serve" in host.file("/proc/%s/cmdline" % main).content_string.replace("\0", " ")


@pytest.mark.hosts("k059", "k0523")
def test_a_lost_scheduler_rolls_back_to_the_old_command(host):
    killed = host.file("/root/kill-scheduler.log").content_string
    assert "SIGKILL to" in killed and "sglang::scheduler" in killed
    assert not host.service(UNIT).is_running and not host.service(UNIT).is_enabled
    main = host.check_output("pgrep -f '[s]glang[.]launch_server.*--port 30000'")
    assert host.run("grep -q %s /proc/%s/cgroup" % (UNIT, main)).rc != 0, "the old command runs outside the unit"
    assert host.check_output(MODELS % V["api_key"]) == "200"
    last = json.loads(host.file(STATE + "/last.json").content_string)
    assert last["action"] == "rollback", last
