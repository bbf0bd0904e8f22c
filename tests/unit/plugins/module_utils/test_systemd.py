"""UnitWatch's reading of `systemctl show`, from outputs recorded on systemd 252 (Debian 12). The real units are
exercised in the molecule scenarios; this pins the decision for each state a start can be in."""
import pytest

from ansible_collections.inferops.sglang.plugins.module_utils._systemd import UnitWatch

BASE = dict(LoadState="loaded", ActiveState="activating", SubState="start", NRestarts="0", Result="success",
            MainPID="4242", ExecMainStatus="0", ExecMainCode="0")


class Shows:
    """Answers `systemctl show` with one recorded state after another."""

    def __init__(self, *states):
        self.states = [dict(BASE, **s) for s in states]

    def __call__(self, argv):
        state = self.states.pop(0) if len(self.states) > 1 else self.states[0]
        return 0, "".join("%s=%s\n" % kv for kv in state.items()), ""


@pytest.mark.parametrize("later, problem", [
    ({}, None),
    ({"SubState": "start-post"}, None),  # the readiness gate runs, the server loads
    ({"ActiveState": "active", "SubState": "running"}, None),
    ({"SubState": "start-post", "MainPID": "0", "ExecMainCode": "1", "ExecMainStatus": "1"},
     "its main process exited (status 1) while ExecStartPost ran"),
    ({"SubState": "auto-restart", "Result": "exit-code"}, "auto-restart): its process exited (exit-code)"),
    ({"ActiveState": "failed", "SubState": "failed", "Result": "timeout"}, "failed (result timeout"),
    ({"NRestarts": "1"}, "restarted (NRestarts 0 -> 1)"),
    ({"ActiveState": "inactive", "SubState": "dead", "ExecMainStatus": "0"}, "stopped (inactive/dead)"),
])
def test_what_a_state_means(later, problem):
    watch = UnitWatch(Shows({}, later), "sglang.service")
    found = watch.problem()
    assert (found is None) if problem is None else (problem in found), found


def test_a_missing_unit_is_an_error():
    with pytest.raises(RuntimeError, match="does not exist"):
        UnitWatch(Shows({"LoadState": "not-found"}), "nope.service")
