"""Finding 1 of issue 40, on the host after the converge: the setuid listener on port 30005 got no unit, root never
ran the owner's script, and nothing was started again on the port."""
import os

import yaml

SCENARIO = os.environ.get("MOLECULE_SCENARIO_DIRECTORY", os.path.dirname(os.path.dirname(__file__)))
V = yaml.safe_load(open(os.path.join(SCENARIO, "vars", "scenario.yml")))


def test_no_unit_and_nothing_on_the_port(host):
    assert not host.file("/etc/systemd/system/sglang-30005.service").exists
    probe = "import socket; print(socket.socket().connect_ex(('127.0.0.1', 30005)) != 0)"
    assert host.check_output('python3 -c "%s"' % probe) == "True"


def test_root_never_ran_the_owners_script(host):
    assert not host.file(V["evil_log"]).exists, host.file(V["evil_log"]).content_string
