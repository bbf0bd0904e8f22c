"""Item 3 of issue 33, on the host after the converge: the rollback started the owner's captured commands again
as the owner and opened their logs as the owner, never through the links the owner put in their place."""
import os

import yaml

SCENARIO = os.environ.get("MOLECULE_SCENARIO_DIRECTORY", os.path.dirname(os.path.dirname(__file__)))
V = yaml.safe_load(open(os.path.join(SCENARIO, "vars", "scenario.yml")))


def test_the_root_only_file_got_nothing_of_the_owners_server(host):
    f = host.file(V["root_only"])
    assert (f.user, f.group, f.mode) == ("root", "root", 0o600)
    assert f.content_string == V["root_only_line"] + "\n"


def test_no_file_was_made_where_the_dangling_link_pointed(host):
    assert not host.file(V["cron_file"]).exists
    assert host.file("/home/%s/sglang-30004.log" % V["owner"]).is_symlink


def test_the_captured_commands_serve_again_as_the_owner_with_their_output_nowhere(host):
    for port in (30003, 30004):
        pids = host.check_output("pgrep -u %s -f -- 'launch_server.*--port %d'" % (V["owner"], port)).split()
        assert len(pids) == 1, pids
        assert host.check_output("readlink /proc/%s/fd/1" % pids[0]) == "/dev/null"
        health = "import urllib.request as u; print(u.urlopen('http://127.0.0.1:%d/health', timeout=10).status)" % port
        assert host.check_output('python3 -c "%s"' % health) == "200"
        assert not host.file("/etc/systemd/system/multi-user.target.wants/sglang-%d.service" % port).exists
