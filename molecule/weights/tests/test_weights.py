"""After the converge (the cutover with a weight cache, a flag change, two refusals, a model change, the daemon killed,
a host restart, each checked there) the rollback on purpose: the captured command serves again, nothing of the
daemon runs, and its unit does not start at boot."""
import json

from serving import SERVER  # pylint: disable=import-error


def test_after_the_rollback_the_captured_command_serves_and_no_daemon_runs(host):
    state = json.loads(host.check_output("/usr/bin/python3 /root/state.py"))
    assert state["health"] == 200 and state["daemons"] == 0 and state["files"] == [], state
    main = host.check_output("pgrep -f '%s.*--port 30000'" % SERVER).split()
    assert len(main) == 1
    assert host.check_output("cat /proc/%s/cgroup" % main[0]).find("sglang-30000") < 0
    assert not host.service("sglang-30000.service").is_enabled
    assert host.check_output("systemctl show sglang-30000-weights.service -p ActiveState --value") == "inactive"
