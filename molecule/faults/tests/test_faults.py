"""Each fault host's real state after the converge: who serves the port, what runs, what the files are."""
import json
import re

import pytest

UNIT = "sglang-30000.service"
STATE = "/var/lib/inferops/cutover/30000"
STOP_GRACE = 10  # _switch/worker.py: a unit that never served gets SIGTERM, then SIGKILL of its cgroup after this
HEALTH = ("python3 -c \"import urllib.request as u; print(u.urlopen('http://127.0.0.1:30000/health', timeout=30)"
          ".status)\"")


def show(host, *props):
    out = host.check_output("systemctl show %s --property=%s" % (UNIT, ",".join(props)))
    return dict(line.split("=", 1) for line in out.splitlines())


def listener(host):
    """The pid listening on 30000 and the unit it runs in (or None)."""
    pid = host.check_output("ss -Htlnp 'sport = :30000' | grep -o 'pid=[0-9]*' | head -1 | cut -d= -f2")
    cgroup = host.file("/proc/%s/cgroup" % pid).content_string
    return int(pid), (UNIT if UNIT in cgroup else None)


def before(host):
    return host.file("/root/before.txt").content_string.splitlines()


def still_running(host, needle):
    """The processes of before.txt whose line holds needle still run, same pid and start time."""
    now = set(host.check_output("ps -e -o pid=,lstart=,args=").splitlines())
    lines = [line for line in before(host) if needle in line]
    return bool(lines) and all(line in now for line in lines)


def served_by_the_unit(host):
    pid, unit = listener(host)
    assert unit == UNIT and int(show(host, "MainPID")["MainPID"]) == pid
    assert host.check_output(HEALTH) == "200"


def back_on_the_captured_command(host):
    """Rolled back: the captured argv serves, outside the unit, which is disabled and not running."""
    pid, unit = listener(host)
    assert unit is None
    cap = json.loads(host.file(STATE + "/capture.json").content_string)
    argv = host.file("/proc/%d/cmdline" % pid).content_string.split("\0")[:-1]
    assert argv == cap["argv"]
    environ = host.file("/proc/%d/environ" % pid).content_string
    assert "SGLANG_DOUBLE_FAULTS" not in environ, "the old command's environment, not the unit's"
    assert host.check_output(HEALTH) == "200"
    state = show(host, "ActiveState", "UnitFileState")
    assert state["ActiveState"] in ("inactive", "failed") and state["UnitFileState"] == "disabled"
    record = json.loads(host.file(STATE + "/last.json").content_string)
    assert record["action"] == "rollback" and record["pid_started"] == pid and record["ready_after_sec"] > 0
    assert [s["step"] for s in record["rollback_steps"]] == ["stop server", "verify zero", "release GPUs",
                                                             "start captured command"]


@pytest.mark.hosts("fault1")
def test_f1_sigterm_ignored_escalation_after_the_drain_budget(host):
    served_by_the_unit(host)
    stop = [s for s in json.loads(host.file(STATE + "/switch.json").content_string)["steps"] if s["step"] == "stop server"][0]
    assert stop["escalated"] and 3.0 <= stop["seconds"] < 15
    assert host.run("pgrep -f 'sglang::' -c").stdout.strip() == "3"


@pytest.mark.hosts("fault2")
def test_f2_orphans_titled_and_untitled_are_gone(host):
    served_by_the_unit(host)
    old = [line.split()[0] for line in before(host) if "sglang::" in line or "spawn_main" in line]
    assert len(old) >= 4
    for pid in old:
        assert not host.file("/proc/%s" % pid).exists or "sglang-30000" in host.file("/proc/%s/cgroup" % pid).content_string
    holders = host.check_output("for p in /proc/[0-9]*; do ls -l $p/fd 2>/dev/null | grep -q /dev/nvidia0 && "
                                "echo ${p#/proc/}; done; true").split()
    for pid in holders:
        assert UNIT in host.file("/proc/%s/cgroup" % pid).content_string, "only the service holds GPU 0 now"


@pytest.mark.hosts("fault3")
def test_f3_strays_refused_then_released_daemon_spared(host):
    served_by_the_unit(host)
    assert still_running(host, "nvidia-persistenced")
    assert not still_running(host, "/dev/nvidia0 /dev/nvidiactl") and not still_running(host, "/dev/nvidia1 /dev/nvidiactl")
    first = [s for s in json.loads(host.file(STATE + "/switch.json").content_string)["steps"] if s["step"] == "release GPUs"]
    assert len(first[0]["released"]) >= 2


@pytest.mark.hosts("fault4")
def test_f4_broken_unit_stopped_nothing(host):
    assert still_running(host, "sglang.launch_server") and still_running(host, "sglang::scheduler_TP0")
    assert not host.file("/etc/systemd/system/%s" % UNIT).exists
    assert host.check_output(HEALTH) == "200"


@pytest.mark.hosts("fault5", "fault6")
def test_f5_f6_crash_during_load_or_never_ready_rolled_back(host):
    back_on_the_captured_command(host)


@pytest.mark.hosts("fault6c")
def test_f6c_port_taken_while_loading_fails_at_once_and_is_rolled_back(host):
    """Another program took the port while the new server loaded, and held it until the rollback had stopped the unit:
    the switch's wait and the unit's gate failed at once naming it (not TimeoutStartSec); the unit, restarted or not
    meanwhile, never served, so the rollback's stop gave it a short grace, not the drain budget nor TimeoutStopSec; a
    SIGKILL of the stuck unit's cgroup, when the rollback made one, says so. The captured command serves again."""
    back_on_the_captured_command(host)
    held = json.loads(host.file("/root/squatter.json").content_string)
    assert held["bound"] < held["let_go"], held
    record = json.loads(host.file(STATE + "/last.json").content_string)
    assert "port 30000 is held by pid" in record["failure"] and "squatter.py" in record["failure"], record["failure"]
    assert "not ready within" not in record["failure"] and "result timeout" not in record["failure"]
    journal = host.check_output("journalctl -u %s --no-pager -o cat" % UNIT)
    assert "port 30000 is held by pid" in journal and "a process outside this unit: the server cannot bind it" in journal
    stop = record["rollback_steps"][0]
    assert stop["step"] == "stop server" and stop["unit"] == UNIT and not stop.get("served"), stop
    # within its grace: SIGTERM, at most STOP_GRACE (10 s), then SIGKILL of its cgroup and systemd's notice of it;
    # never the drain budget nor systemd's own stop, each of which waits 120 s (TimeoutStopSec) for a server that
    # ignores SIGTERM. The step holds the unit's state as the worker read it (unit_read), which chose the branch.
    unit = host.file("/etc/systemd/system/" + UNIT).content_string
    assert re.search(r"^TimeoutStopSec=120$", unit, re.M), "the drain budget, so a wrong branch shows as 120 s"
    assert stop["seconds"] < STOP_GRACE + 5, stop
    if stop.get("escalated"):
        assert stop["escalation"].startswith(UNIT + " ") and "SIGKILL to its cgroup" in stop["escalation"], stop


@pytest.mark.hosts("fault5b")
def test_f5b_bad_patch_rolled_back_onto_the_venv_as_it_was(host):
    back_on_the_captured_command(host)
    # bytecode caches are Python's to rewrite (they record the source's mtime); every other file must be as it was
    now = host.check_output("find /opt/sglang/venv -type f ! -name '*.pyc' -print0 | sort -z | xargs -0 sha256sum")
    was = "\n".join(line for line in host.file("/root/venv-before.txt").content_string.splitlines()
                    if not line.endswith(".pyc"))
    assert now == was, "every file of the venv is back byte for byte"
    assert "patched build" not in host.file("/opt/sglang/venv/lib/python3.11/site-packages/sglang/_double/server.py").content_string


@pytest.mark.hosts("fault7")
def test_f7_controller_killed_during_the_switch_host_still_ends_serving(host):
    served_by_the_unit(host)
    switch = json.loads(host.file(STATE + "/switch.json").content_string)
    assert switch["finished"] and switch["error"] is None and switch["action"] == "switch"


@pytest.mark.hosts("fault9")
def test_f9_f10_nothing_touched(host):
    assert still_running(host, "http.server 30000")
    assert not host.file("/etc/systemd/system/%s" % UNIT).exists
    assert not host.file("/var/lib/inferops/cutover/30000/capture.json").exists
    assert not host.file("/var/lib/inferops/cutover/30005").exists


@pytest.mark.hosts("fault9")
def test_unit_from_variables_alone(host):
    unit = "sglang-30002.service"
    assert host.check_output("systemctl is-active %s" % unit) == "active"
    pid = host.check_output("systemctl show %s --property=MainPID --value" % unit)
    argv = host.file("/proc/%s/cmdline" % pid).content_string.split("\0")[:-1]
    assert argv == ["/opt/sglang/venv/bin/python", "-m", "sglang.launch_server", "--model-path", "/models/tiny-llama",
                    "--port", "30002"]
    assert not host.file("/var/lib/inferops/cutover/30002/capture.json").exists


def records(host, kind):
    """The port's records of a kind, oldest first (history/STAMP-KIND.json)."""
    names = sorted(host.check_output("ls %s/history" % STATE).split())
    return [json.loads(host.file("%s/history/%s" % (STATE, n)).content_string) for n in names
            if n.endswith("-%s.json" % kind)]


@pytest.mark.hosts("fault2")
def test_changed_input_restarted_the_service_and_a_failed_change_went_back_to_it(host):
    """The restart with a new environment value served; the next change, which cannot serve, was rolled back to that
    unit as it served (its files put back), not to the hand launch: the service serves with the value, enabled."""
    pid = int(show(host, "MainPID")["MainPID"])
    environ = host.file("/proc/%d/environ" % pid).content_string.split("\0")
    assert "INFEROPS_NEW_VALUE=1" in environ and not [e for e in environ if "crash_during_load" in e]
    assert records(host, "cutover")[-1]["action"] == "restart"
    last = json.loads(host.file(STATE + "/last.json").content_string)
    assert last["action"] == "rollback" and last["previous_unit"] is True and last["unit_started"] == UNIT
    assert show(host, "UnitFileState", "ActiveState") == {"UnitFileState": "enabled", "ActiveState": "active"}
    assert not host.file(STATE + "/previous-unit.json").exists
