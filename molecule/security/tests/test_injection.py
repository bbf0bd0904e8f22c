"""Item 2 of issue 33, on the host after the converge: the owner's newline in the working directory and in --host
added no line to any unit, root ran nothing of theirs, and their servers were never stopped."""
import os

import yaml

SCENARIO = os.environ.get("MOLECULE_SCENARIO_DIRECTORY", os.path.dirname(os.path.dirname(__file__)))
V = yaml.safe_load(open(os.path.join(SCENARIO, "vars", "scenario.yml")))
UNIT_DIRS = "/etc/systemd /run/systemd/system /run/systemd/transient /lib/systemd/system /usr/local/lib/systemd"


def test_no_unit_runs_the_owners_script(host):
    """No unit on the host names the owner's script, and no unit of the cutover's has an Exec*= line with the + or
    ! prefix (run with full privileges)."""
    assert host.run("grep -rlsF -- %s %s" % (V["evil"], UNIT_DIRS)).stdout.split() == []
    ours = host.run("ls /etc/systemd/system/sglang-*.service").stdout.split()
    assert ours == ["/etc/systemd/system/sglang-%d.service" % p for p in (30002, 30003, 30004)], \
        "the family case's unit and the rollback case's, and no other"
    assert host.run(r"grep -lE '^Exec[A-Za-z]*=[-@:]*[+!]' %s" % " ".join(ours)).stdout.split() == []


def test_root_ran_nothing_of_the_owners(host):
    assert not host.file(V["evil_log"]).exists, host.file(V["evil_log"]).content_string


def test_the_refused_servers_were_never_stopped_nor_given_a_unit(host):
    for port in (30000, 30001):
        assert not host.file("/etc/systemd/system/sglang-%d.service" % port).exists
        pids = host.check_output("pgrep -u %s -f -- '--port %d'" % (V["owner"], port)).split()
        assert len(pids) == 1, pids
