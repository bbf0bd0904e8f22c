"""Each release after its cutover: which systemd and Python it has (printed), the rollback it went through, the unit
written for its systemd and verified there, the gate on the server's own interpreter; then a host restart."""
import json
import re

from restart import active_again, restart  # pylint: disable=import-error

UNIT = "sglang-30000.service"
STATE = "/var/lib/inferops/cutover/30000"
# what each test bed is built from (tests/testbed/build-image.sh): the release, its systemd and its python3
RELEASES = {"debian11": ("11", 247, (3, 9)), "debian12": ("12", 252, (3, 11)), "debian13": ("13", 257, (3, 13))}


def name(host):
    return host.backend.get_hostname()


def versions(host):
    release = host.file("/etc/debian_version").content_string.strip()
    systemd = host.check_output("systemctl --version").split()[1]
    python = host.check_output("/opt/sglang/venv/bin/python -c 'import platform; print(platform.python_version())'")
    return release, systemd, python


def test_the_release_its_systemd_and_python(host):
    release, systemd, python = versions(host)
    print("\nplatform %s: Debian %s, systemd %s, Python %s" % (name(host), release, systemd, python))
    want_release, want_systemd, want_python = RELEASES[name(host)]
    assert release.split(".")[0] == want_release or release.startswith("trixie")
    assert int(systemd.split(".")[0].split("~")[0]) == want_systemd
    assert tuple(int(x) for x in python.split(".")[:2]) == want_python


def test_the_crashing_cutover_was_rolled_back_before_the_cutover(host):
    runs = sorted(host.check_output("ls %s/history" % STATE).split())  # STAMP-KIND.json, oldest first
    assert [r.split("-", 1)[1] for r in runs] == ["rollback.json", "cutover.json"], runs  # the rollback came first
    rollback = json.loads(host.file("%s/history/%s" % (STATE, runs[0])).content_string)
    assert rollback["action"] == "rollback"
    assert [s["step"] for s in rollback["rollback_steps"]][:2] == ["stop server", "verify zero"]


def test_the_unit_is_written_for_this_systemd_verified_and_runs_the_gate_on_the_servers_python(host):
    unit = host.file("/etc/systemd/system/" + UNIT).content_string
    assert "/usr/bin/python3" not in unit
    post = re.search(r"^ExecStartPost=(\S+) ", unit, re.M).group(1)
    start = re.search(r"^ExecStart=@?(\S+)", unit, re.M).group(1)
    assert post == start == "/opt/sglang/venv/bin/python"
    for line in ("Type=exec", "RestrictSUIDSGID=yes", "LockPersonality=yes"):  # 247 and newer know them all
        assert line in unit.splitlines()
    check = host.run("systemd-analyze verify /etc/systemd/system/" + UNIT)
    assert check.rc == 0, check.stderr
    assert host.service("sglang-30000").is_enabled


def serving(host):
    return host.run("/opt/sglang/venv/bin/python -c \"import urllib.request as u; "
                    "print(u.urlopen('http://127.0.0.1:30000/health', timeout=10).status)\"").stdout.strip()


def servers(host):
    out = host.run("pgrep -f -- 'sglang.launch_server.*--port 30000'").stdout.split()
    return [p for p in out if "pgrep" not in host.run("cat /proc/%s/cmdline" % p).stdout]


def test_the_service_serves_once_and_again_after_a_host_restart(host):
    assert serving(host) == "200" and len(servers(host)) == 1
    assert restart(name(host)) == 0
    assert active_again(host, UNIT) == "active"
    assert serving(host) == "200" and len(servers(host)) == 1
