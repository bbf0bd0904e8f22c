"""UnitWatch's reading of `systemctl show`, from outputs recorded on systemd 252 (Debian 12). The real units are
exercised in the molecule scenarios; this pins the decision for each state a start can be in. And the end of a log
file, read for real as whoever controls its folder."""
import os

import pytest

from ansible_collections.inferops.sglang.plugins.module_utils._host import systemd as _systemd
from ansible_collections.inferops.sglang.plugins.module_utils._host.systemd import UnitWatch

from ..conftest import NOBODY

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
     "its main process exited with status 1: SGLang's start failed (0.5.15+: a scheduler lost while loading) while "
     "ExecStartPost ran"),
    ({"SubState": "auto-restart", "Result": "exit-code", "ExecMainCode": "1", "ExecMainStatus": "3"},
     "auto-restart): its main process exited with status 3: uvicorn's startup failure: the port was taken"),
    ({"ActiveState": "failed", "SubState": "failed", "Result": "timeout"}, "failed (result timeout): its start failed"),
    ({"NRestarts": "1"}, "restarted (NRestarts 0 -> 1)"),
    ({"ActiveState": "inactive", "SubState": "dead", "ExecMainCode": "1", "ExecMainStatus": "0"},
     "stopped (inactive/dead): its main process exited with status 0 (result success)"),
])
def test_what_a_state_means(later, problem):
    watch = UnitWatch(Shows({}, later), "sglang.service")
    found = watch.problem()
    assert (found is None) if problem is None else (problem in found), found


# How each version's server ends, as systemd 252 shows it with the unit's SuccessExitStatus=SIGKILL and
# RestartForceExitStatus=SIGKILL (Restart=on-failure): (ExecMainCode, ExecMainStatus, Result, SubState after it).
@pytest.mark.parametrize("case, show, says", [
    # 0.5.15+: a scheduler SIGKILLed while loading: exit 1 (seen on a real 0.5.15); a failure, restarted
    ("lost_while_loading", dict(ExecMainCode="1", ExecMainStatus="1", Result="exit-code"),
     "exited with status 1: SGLang's start failed (0.5.15+: a scheduler lost while loading) (result exit-code)"),
    # 0.5.15+: a scheduler lost once ready: SIGQUIT, 5 s, SIGKILL of itself; a success by SuccessExitStatus, yet
    # restarted by RestartForceExitStatus - systemd's Result says success, which must not be what the wait says
    ("lost_once_ready", dict(ExecMainCode="2", ExecMainStatus="9", Result="success"),
     "was killed by SIGKILL: SGLang 0.5.15+ ends so after losing a scheduler"),
    # the port taken by another SGLang server: exit 3 once its warm-up talked to that one (about 26 s)
    ("port_taken_by_sglang", dict(ExecMainCode="1", ExecMainStatus="3", Result="exit-code"),
     "exited with status 3: uvicorn's startup failure: the port was taken when it bound"),
    # the port taken by another program: SIGKILL of itself when the warm-up gives up (about 120 s)
    ("port_taken_by_another", dict(ExecMainCode="2", ExecMainStatus="9", Result="success"),
     "a server whose port another program held"),
    # a SIGTERM before the first generate with --skip-server-warmup: death by SIGTERM, a clean exit for systemd
    ("sigterm_skip_warmup", dict(ExecMainCode="2", ExecMainStatus="15", Result="success"), "was killed by SIGTERM (result"),
])
def test_each_versions_exit_is_named_as_it_ended(case, show, says):
    watch = UnitWatch(Shows({}, dict(show, SubState="auto-restart")), "sglang.service")
    found = watch.problem()
    assert found.startswith("unit sglang.service is in activating (auto-restart): its main process ") and says in found, (
        case, found)
    assert "exited (success)" not in found


def test_an_exit_in_words():
    assert _systemd.exit_of(dict(ExecMainCode="0", ExecMainStatus="0")) is None  # still running
    assert _systemd.exit_of(dict(ExecMainCode="1", ExecMainStatus="0")) == "exited with status 0"  # 0.5.23's clean stop
    assert _systemd.exit_of(dict(ExecMainCode="3", ExecMainStatus="11")) == "was killed by SIGSEGV (core dumped)"
    assert _systemd.exit_of(dict(ExecMainCode="2", ExecMainStatus="77")) == "was killed by signal 77"


@pytest.mark.parametrize("props, served", [
    (dict(ActiveState="active"), True),
    (dict(ActiveState="activating", ExecMainStartTimestampMonotonic="5000", ActiveEnterTimestampMonotonic="1000"), False),
    (dict(ActiveState="deactivating", ExecMainStartTimestampMonotonic="1000", ActiveEnterTimestampMonotonic="5000"), True),
    (dict(ActiveState="deactivating", ExecMainStartTimestampMonotonic="5000", ActiveEnterTimestampMonotonic="0"), False),
    (dict(ActiveState="failed"), False),
])
def test_served_means_active_in_this_start(props, served):
    assert _systemd.served(props) is served


def test_a_missing_unit_is_an_error():
    with pytest.raises(RuntimeError, match="does not exist"):
        UnitWatch(Shows({"LoadState": "not-found"}), "nope.service")


@pytest.mark.skipif(os.getuid() != 0, reason="needs root: the log is nobody's")
def test_the_failures_log_lines_never_quote_a_root_only_file_the_owner_linked_to(tmp_path, home):
    secret = tmp_path / "root-only"
    secret.write_text("root's secret\n")
    secret.chmod(0o600)
    (home / "nohup.out").symlink_to(secret)
    assert _systemd.tail(str(home / "nohup.out")) == []
    (home / "real.log").write_text("one\ntwo\n")
    os.chown(str(home / "real.log"), NOBODY.pw_uid, NOBODY.pw_gid)
    assert _systemd.tail(str(home / "real.log")) == ["one", "two"]
    (home / "real.log").chmod(0o600)
    os.chown(str(home / "real.log"), 0, 0)  # root's file in nobody's folder: nobody cannot read it, so neither do we
    assert _systemd.tail(str(home / "real.log")) == []
    os.mkfifo(str(home / "fifo"))
    assert _systemd.tail(str(home / "fifo")) == []  # and it does not hang


def _entry(message, pid, at, **fields):
    import json
    return json.dumps(dict(fields, MESSAGE=message, _PID=str(pid), __REALTIME_TIMESTAMP=str(at)))


# `journalctl -u sglang-30000.service -o json` of a unit that a hung server got restarted once by the watchdog and
# crashed once (systemd 252's own entries, _PID 1; the unit's lines by its processes), with what a process of the unit
# could print to imitate systemd: a MESSAGE_ID of its own, which carries _PID of that process
JOURNAL = "\n".join([
    _entry("The server is fired up and ready to roll!", 812, 1765000000000000),
    _entry("liveness: no answer from /health_generate (HTTP 503) and no progress: its scheduler sglang::scheduler "
           "(pid 813) is stopped", 901, 1765000030000000),
    _entry("sglang-30000.service: Watchdog timeout (limit 2min)!", 1, 1765000150000000),
    _entry("liveness: no answer from /health_generate (no answer) and no progress: its scheduler sglang::scheduler "
           "(pid 813) is gone", 901, 1765000150500000),  # what the checker saw of the end systemd began
    _entry("sglang-30000.service: Failed with result 'watchdog'.", 1, 1765000151000000,
           MESSAGE_ID=_systemd.UNIT_FAILED, UNIT_RESULT="watchdog"),
    _entry("sglang-30000.service: Scheduled restart job, restart counter is at 1.", 1, 1765000161000000,
           MESSAGE_ID=_systemd.RESTART_SCHEDULED),
    _entry("fake", 990, 1765000200000000, MESSAGE_ID=_systemd.UNIT_FAILED, UNIT_RESULT="watchdog"),
    _entry("fake", 990, 1765000201000000, MESSAGE_ID=_systemd.RESTART_SCHEDULED),
    _entry("sglang-30000.service: Main process exited, code=exited, status=1/FAILURE", 1, 1765000300000000),
    _entry("sglang-30000.service: Failed with result 'exit-code'.", 1, 1765000300100000,
           MESSAGE_ID=_systemd.UNIT_FAILED, UNIT_RESULT="exit-code"),
    _entry("sglang-30000.service: Scheduled restart job, restart counter is at 2.", 1, 1765000310000000,
           MESSAGE_ID=_systemd.RESTART_SCHEDULED),
    "not json",
])


def test_restarts_by_reason_from_systemds_own_entries_with_the_checkers_why():
    calls = []

    def run(argv):
        calls.append(argv)
        return 0, JOURNAL, ""

    found = _systemd.restarts(run, "sglang-30000.service")
    assert found["total"] == 2 and found["reasons"] == {"watchdog": 1, "exit-code": 1}, found
    assert found["last"] == {"reason": "exit-code", "at": 1765000310.0, "why": None}
    at = calls[0].index("journalctl")
    assert calls[0][at:at + 3] == ["journalctl", "-u", "sglang-30000.service"]
    first = _systemd.restarts(lambda argv: (0, "\n".join(JOURNAL.splitlines()[:6]), ""), "sglang-30000.service")
    assert first["last"] == {"reason": "watchdog", "at": 1765000161.0, "why": (
        "no answer from /health_generate (HTTP 503) and no progress: its scheduler sglang::scheduler (pid 813) is stopped")}


def test_a_restart_after_an_end_the_unit_counts_as_clean_is_a_success():
    """SuccessExitStatus=SIGKILL (SGLang's drained stop ends so) with RestartForceExitStatus=SIGKILL: an OOM kill or a
    kill -9 of the running server leaves the unit's result success, so its restart follows systemd's "Deactivated
    successfully" (SD_MESSAGE_UNIT_SUCCESS), no failure (seen on systemd 252, and on a real 0.5.15 server)."""
    journal = "\n".join([
        # a stop on request: a clean end, and no restart follows; the next start clears it
        _entry("sglang-30000.service: Deactivated successfully.", 1, 1765000300000000,
               MESSAGE_ID=_systemd.UNIT_SUCCESS),
        _entry("Starting sglang-30000.service...", 1, 1765000301000000, MESSAGE_ID=_systemd.UNIT_STARTING),
        _entry("sglang-30000.service: Scheduled restart job, restart counter is at 1.", 1, 1765000302000000,
               MESSAGE_ID=_systemd.RESTART_SCHEDULED),
        _entry("sglang-30000.service: Deactivated successfully.", 1, 1765000400000000,
               MESSAGE_ID=_systemd.UNIT_SUCCESS),
        _entry("sglang-30000.service: Scheduled restart job, restart counter is at 3.", 1, 1765000410000000,
               MESSAGE_ID=_systemd.RESTART_SCHEDULED),
        _entry("fake", 990, 1765000500000000, MESSAGE_ID=_systemd.UNIT_SUCCESS),  # not systemd's
        _entry("sglang-30000.service: Scheduled restart job, restart counter is at 4.", 1, 1765000510000000,
               MESSAGE_ID=_systemd.RESTART_SCHEDULED),
    ])
    found = _systemd.restarts(lambda argv: (0, journal, ""), "sglang-30000.service")
    assert found["reasons"] == {"success": 1, "unknown": 2}, found
    assert found["last"]["reason"] == "unknown"


def test_no_readable_journal_is_none():
    assert _systemd.restarts(lambda argv: (1, "", "No journal files were found."), "x.service") is None
    assert _systemd.restarts(lambda argv: (0, "", ""), "x.service") == {"total": 0, "reasons": {}, "last": None}
