"""Each case after the cutover, read on the host and in the playbooks' output the controller kept (what the operator
read). The host restarts after these (test_units_restarted.py: pytest runs that file after this one)."""
import json
import os
import re

import pytest

OUT = os.environ["MOLECULE_EPHEMERAL_DIRECTORY"]
STATE = "/var/lib/inferops/cutover/30000"
KIMI = "sglang-kimi.service"
MANAGED = "sglang-30000.service"
# the refused cases, and what the first error line the operator reads says
REFUSED = {
    "refuse": "cutover_existing_units is refuse",
    "stray": "processes outside the server's family hold its GPUs",
    "full": "free in its filesystem",
    "readonly": "read-only",
    "locked": "switch.lock stays held",
}
HEALTH = ("python3 -c \"import urllib.request as u; print(u.urlopen('http://127.0.0.1:30000/health', timeout=30)"
          ".status)\"")


def name(host):
    return host.backend.get_hostname()


def output(run):
    """What ansible-playbook printed in the converge's run `run` (check, cutover, rollback, rerun)."""
    with open(os.path.join(OUT, run + ".out")) as f:
        return re.sub(r"\x1b\[[0-9;]*m", "", f.read())


def flat(text):
    """text with every run of white space one space: a result's YAML breaks long lines."""
    return " ".join(text.split())


def recap(run, host):
    """The play recap's counts of host in run: {ok, changed, failed, ...}."""
    line = re.search(r"^%s\s+:\s+(.*)$" % re.escape(host), output(run), re.M)
    assert line, "no recap of %s in %s.out" % (host, run)
    return dict((k, int(v)) for k, v in re.findall(r"(\w+)=(\d+)", line.group(1)))


def headline(run, host):
    """The first error line the operator reads of host's failure in run: the [ERROR] line before its fatal line."""
    lines = output(run).splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("fatal: [%s]" % host))
    return next(line for line in reversed(lines[:at]) if line.startswith("[ERROR]"))


def state(host, unit, *props):
    out = host.check_output("systemctl show %s --property=%s" % (unit, ",".join(props)))
    return dict(line.split("=", 1) for line in out.splitlines())


def listener(host):
    """(pid, the service whose cgroup holds it, or None) of what listens on port 30000 (a server started from an SSH
    session is in ssh.service's)."""
    pid = int(host.check_output("ss -Htlnp 'sport = :30000' | grep -o 'pid=[0-9]*' | head -1 | cut -d= -f2"))
    unit = re.search(r"/([^/]+\.service)(/|$)", host.file("/proc/%d/cgroup" % pid).content_string.strip())
    return pid, unit.group(1) if unit else None


def servers(host):
    """The SGLang servers' main processes on port 30000."""
    out = host.run("pgrep -f -- 'sglang.launch_server.*--port 30000'").stdout.split()
    return [p for p in out if "pgrep" not in host.run("cat /proc/%s/cmdline" % p).stdout]


def serving_units(host):
    """Every service unit whose ExecStart (as systemd parsed it, drop-ins applied) runs SGLang on port 30000:
    {name: (UnitFileState, ActiveState)}."""
    names = [n for n in host.check_output(
        "systemctl list-unit-files --type=service --no-legend --no-pager | awk '{print $1}'").split() if "@." not in n]
    out = host.check_output("systemctl show --property=Id,ExecStart,UnitFileState,ActiveState %s" % " ".join(names))
    found = {}
    for block in out.split("\n\n"):
        props = dict(line.split("=", 1) for line in block.splitlines() if "=" in line)
        argv = re.findall(r"argv\[\]=([^;]*)", props.get("ExecStart", ""))
        ports = re.findall(r"--port[ =](\d+)", argv[-1]) if argv else []
        if argv and "sglang.launch_server" in argv[-1] and (ports[-1] if ports else "30000") == "30000":
            found[props["Id"]] = (props["UnitFileState"], props["ActiveState"])
    return found


def record(host):
    return json.loads(host.file(STATE + "/last.json").content_string)


@pytest.mark.hosts("hand", "named")
def test_check_mode_shows_the_operators_unit_and_what_the_cutover_would_do_to_it(host):
    text = output("check")
    assert recap("check", name(host))["failed"] == 0
    if name(host) == "hand":
        assert ("sglang-kimi.service (/etc/systemd/system/sglang-kimi.service, enabled, inactive): replace: backed up, "
                "disabled") in flat(text), text[-3000:]
    else:  # the unit of the same name: its file is shown as it will change
        assert "-Restart=always" in text and "+Restart=on-failure" in text
        assert "what changes in it: Restart: always -> on-failure" in flat(text)


@pytest.mark.hosts("hand", "under")
def test_the_operators_unit_is_backed_up_disabled_stopped_and_recorded(host):
    assert recap("cutover", name(host))["failed"] == 0
    now = state(host, KIMI, "UnitFileState", "ActiveState")
    assert now["UnitFileState"] == "disabled" and now["ActiveState"] in ("inactive", "failed"), now  # stopped
    pid, unit = listener(host)
    assert unit == MANAGED and len(servers(host)) == 1
    files = ["/etc/systemd/system/sglang-kimi.service"] if name(host) == "hand" else [
        "/lib/systemd/system/sglang-kimi.service", "/etc/systemd/system/sglang-kimi.service.d/port.conf"]
    for path in files:
        backup = host.file(STATE + "/units" + path)
        assert backup.exists and backup.mode == 0o600 and backup.sha256sum == host.file(path).sha256sum, path
    (taken,) = record(host)["units"]
    assert taken["unit"] == KIMI and taken["action"] == "replace" and taken["files"] == files
    assert taken["before"] == {"UnitFileState": "enabled",
                               "ActiveState": "active" if name(host) == "under" else "inactive"}
    assert taken["serves"] == (name(host) == "under")
    assert "sglang-kimi.service" in host.file(STATE + "/last.md").content_string


@pytest.mark.hosts("named")
def test_the_operators_unit_of_the_managed_name_is_backed_up_and_the_record_says_what_changed_in_it(host):
    assert recap("cutover", name(host))["failed"] == 0
    path = "/etc/systemd/system/sglang-kimi.service"
    backup = host.file(STATE + "/units" + path).content_string
    assert "Restart=always" in backup and "Description=Kimi on SGLang (written by hand)" in backup
    assert "inferops.sglang.systemd_unit" in host.file(path).content_string
    (taken,) = record(host)["units"]
    assert taken["unit"] == KIMI and taken["action"] == "rewrite" and taken["files"] == [path]
    assert "Restart: always -> on-failure" in taken["changed"] and "Type: simple -> exec" in taken["changed"]
    assert "Restart: always -> on-failure" in host.file(STATE + "/last.md").content_string
    pid, unit = listener(host)
    assert unit == KIMI and len(servers(host)) == 1
    assert host.run("systemctl cat %s" % MANAGED).rc != 0, "no second unit"


@pytest.mark.hosts(*sorted(REFUSED))
def test_a_refusal_says_why_first_and_leaves_the_units_and_the_state_folder_as_they_were(host):
    assert recap("cutover", name(host))["failed"] == 1 and recap("cutover", name(host))["changed"] == 0
    first = headline("cutover", name(host))
    assert first.startswith("[ERROR]: Task failed: ") and REFUSED[name(host)] in first, first
    assert "failed_when" not in first and len(first) < 800, first
    assert host.file("/root/snapshot-after.txt").content_string == host.file("/root/snapshot-before.txt").content_string
    assert host.run("find /var/lib/inferops -name '*.tmp'").stdout == ""
    pid, unit = listener(host)
    assert unit not in (KIMI, MANAGED) and len(servers(host)) == 1 and host.check_output(HEALTH) == "200", \
        "the old server serves on"


@pytest.mark.hosts("hand", "under", "named")
def test_a_second_cutover_changes_nothing(host):
    assert recap("rerun", name(host)) == dict(recap("rerun", name(host)), changed=0, failed=0)


@pytest.mark.hosts("rollback")
def test_the_rollback_restores_and_enables_the_unit_it_replaced(host):
    assert recap("cutover", name(host))["failed"] == 0 and recap("rollback", name(host))["failed"] == 0
    assert state(host, KIMI, "UnitFileState")["UnitFileState"] == "enabled"
    assert state(host, MANAGED, "UnitFileState")["UnitFileState"] == "disabled"
    before = host.file("/root/snapshot-before.txt").content_string
    assert "%s  /etc/systemd/system/sglang-kimi.service" % host.file("/etc/systemd/system/sglang-kimi.service").sha256sum in before
    pid, unit = listener(host)
    assert unit not in (KIMI, MANAGED) and len(servers(host)) == 1 and host.check_output(HEALTH) == "200", \
        "the captured command"
