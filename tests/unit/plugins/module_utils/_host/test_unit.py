"""A unit's text before it is installed: optional dependencies added where the host has them."""
from ansible_collections.inferops.sglang.plugins.module_utils._host.unit import names, with_wants

UNIT = "# managed\n[Unit]\nDescription=x\nWants=network-online.target\nAfter=network-online.target\n\n[Service]\nAfter=no\n"


def test_the_units_join_the_first_wants_and_after_of_the_unit_section_only():
    got = with_wants(UNIT, ["nvidia-persistenced.service"])
    assert got.splitlines() == ["# managed", "[Unit]", "Description=x",
                                "Wants=network-online.target nvidia-persistenced.service",
                                "After=network-online.target nvidia-persistenced.service", "", "[Service]", "After=no"]


def test_nothing_to_add_leaves_the_text_as_it_is():
    assert with_wants(UNIT, []) == UNIT


def test_a_unit_section_without_wants_or_after_gets_both_lines():
    got = with_wants("[Unit]\nDescription=x\n\n[Service]\nExecStart=/bin/true\n", ["a.service", "b.service"])
    assert got.splitlines()[:4] == ["[Unit]", "Wants=a.service b.service", "After=a.service b.service", "Description=x"]


def run(argv):
    import subprocess
    p = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True, check=False)
    return p.returncode, p.stdout, p.stderr


def test_systemd_analyze_accepts_a_good_unit_and_names_what_is_wrong_with_a_bad_one():
    from ansible_collections.inferops.sglang.plugins.module_utils._host.unit import verify
    good = "[Unit]\nDescription=x\n[Service]\nType=exec\nExecStart=/bin/sleep 1\n[Install]\nWantedBy=multi-user.target\n"
    assert verify(run, good, "x.service") is None
    why = verify(run, good.replace("/bin/sleep", "/opt/missing/bin/python"), "x.service")
    assert "/opt/missing/bin/python" in why and "x.service" in why and "inferops-unit-" not in why


def test_the_names_an_environment_file_sets():
    text = "# managed\nPATH=/opt/v/bin:/usr/bin\nINFEROPS_API_KEY=\"a=b\"\n  # a comment=x\nHF_HOME=/data\n\n"
    assert names(text) == ["HF_HOME", "INFEROPS_API_KEY", "PATH"]
    assert names("") == []


def test_a_settings_table_entry_for_every_line_the_unit_template_writes():
    import re
    from ansible_collections.inferops.sglang.plugins.module_utils._host.unit import SINCE
    from tests.unit.conftest import ROOT
    template = (ROOT / "roles/systemd_unit/templates/unit.service.j2").read_text()
    keys = set(re.findall(r"^([A-Z][A-Za-z]+)=", template, re.M))
    assert "RestrictSUIDSGID" in keys and "Type" in keys
    assert sorted(keys - set(SINCE)) == []
    defaults = (ROOT / "roles/systemd_unit/defaults/main.yml").read_text()
    assert sorted(set(re.findall(r"^  (Limit[A-Z]+):", defaults, re.M)) - set(SINCE)) == []


HARDENED = ("[Unit]\nStartLimitIntervalSec=3600\n[Service]\nType=exec\nExecStart=/bin/sleep 1\nKillMode=mixed\n"
            "# RestrictSUIDSGID=yes in a comment stays\nProtectKernelModules=yes\nRestrictSUIDSGID=yes\n"
            "LockPersonality=yes\n")


def test_the_unit_for_debian_11s_systemd_keeps_everything():
    from ansible_collections.inferops.sglang.plugins.module_utils._host.unit import for_systemd
    assert for_systemd(HARDENED, 247) == (HARDENED, [])
    assert for_systemd(HARDENED, None) == (HARDENED, [])


def test_an_older_systemd_gets_the_older_equivalent_or_nothing_and_is_told_what_needs_which_version():
    from ansible_collections.inferops.sglang.plugins.module_utils._host.unit import for_systemd
    text, omitted = for_systemd(HARDENED, 239)  # RHEL 8's upstream version
    assert omitted == ["Type=exec (needs 240)", "RestrictSUIDSGID=yes (needs 242)"]
    assert "Type=simple" in text.splitlines() and "RestrictSUIDSGID=yes" not in text.splitlines()
    assert "# RestrictSUIDSGID=yes in a comment stays" in text and "LockPersonality=yes" in text
    text, omitted = for_systemd(HARDENED, 208)
    assert "KillMode=control-group" in text.splitlines() and "KillMode=mixed (needs 209)" in omitted
    assert "StartLimitIntervalSec=3600 (needs 230)" in omitted and "StartLimitIntervalSec" not in text


def test_this_hosts_systemd_version():
    from ansible_collections.inferops.sglang.plugins.module_utils._host.unit import systemd_version
    first = run(["systemctl", "--version"])[1].split()[1]
    assert systemd_version(run) == int(first.split(".")[0].split("~")[0])
    assert systemd_version(lambda argv: (0, "systemd 257 (257.9-1~deb13u1)\n+PAM +AUDIT\n", "")) == 257
    assert systemd_version(lambda argv: (1, "", "no systemctl")) is None


SERVICE = "[Unit]\nDescription=x\n[Service]\nType=exec\nExecStart=/opt/v/bin/python -m x\nWorkingDirectory=/srv\n" \
          "User=svc\nGroup=svc\n"


def test_a_user_units_lines_that_would_run_as_root():
    """The unit template never writes them: a value written into the unit (a captured cwd, a --host) that added one
    would have root run what the server's owner chose."""
    from ansible_collections.inferops.sglang.plugins.module_utils._host.unit import root_lines
    assert root_lines(SERVICE) == []
    assert root_lines(SERVICE.replace("WorkingDirectory=/srv", "WorkingDirectory=/srv\nExecStartPre=+/srv/evil.sh")) \
        == ["line 7: ExecStartPre=+/srv/evil.sh"]
    for line in ("ExecStartPost=-!/srv/evil.sh", "ExecStopPost=:+/srv/evil.sh", "PermissionsStartOnly=yes",
                 "User=root", "Group=root"):
        assert root_lines(SERVICE + line + "\n") == ["line 9: " + line], line
    assert root_lines(SERVICE + "ExecStartPost=-/srv/gate\nEnvironment=A=+b\n# ExecStartPre=+/x\n") == []
    assert root_lines(SERVICE.replace("User=svc", "User=root") + "ExecStartPre=+/usr/bin/true\n") == [], \
        "a root unit runs everything as root anyway"
    assert root_lines("[Install]\nExecStartPre=+/x\n[Service]\nUser=svc\n") == [], "only [Service] runs commands"
