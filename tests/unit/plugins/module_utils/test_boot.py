"""Boot launchers in fixture trees of both layouts: Debian (crontabs/, /etc/rc.local) and the RHEL family
(/var/spool/cron/root, /etc/rc.d/rc.local with /etc/rc.local a link to it)."""
import os

import pytest

from ansible_collections.inferops.sglang.plugins.module_utils._boot import boot_files, disabled_launchers, launchers

SERVER = "/opt/sglang/venv/bin/python -m sglang.launch_server --model-path /m --port 30000"
MARK = "# disabled by inferops.sglang cutover, sglang-30000.service runs the server now: "


def tree(root, files, links=()):
    root.mkdir()
    for path, text in files.items():
        p = root / path
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    for path, target in links:
        os.symlink(target, str(root / path))
    return str(root)


@pytest.fixture
def debian(tmp_path):
    return tree(tmp_path / "debian", {
        "var/spool/cron/crontabs/root": "# m h dom mon dow command\n@reboot nohup %s &\n0 * * * * %s\n" % (SERVER, SERVER),
        "etc/rc.local": "#!/bin/sh -e\n/opt/sglang/venv/bin/sglang serve --model-path /m --port 30001 &\nexit 0\n",
        "etc/crontab": "17 * * * * root cd / && run-parts --report /etc/cron.hourly\n",
        "etc/cron.d/e2scrub_all": "30 3 * * 0 root test -e /run/systemd/system || /sbin/e2scrub_all\n",
    })


@pytest.fixture
def rhel(tmp_path):
    return tree(tmp_path / "rhel", {
        "var/spool/cron/root": "@reboot %s\n" % SERVER.replace("30000", "30001"),
        "etc/rc.d/rc.local": "#!/bin/bash\ntouch /var/lock/subsys/local\n%s &\n" % SERVER,
        "etc/cron.d/0hourly": "01 * * * * root run-parts /etc/cron.hourly\n",
    }, links=[("etc/rc.local", "rc.d/rc.local")])


def test_debians_crontab_and_rc_local_are_read(debian):
    rel = [(os.path.relpath(p, debian), crontab) for p, crontab in boot_files(debian)]
    assert rel == [("etc/crontab", True), ("etc/rc.local", False), ("etc/cron.d/e2scrub_all", True),
                   ("var/spool/cron/crontabs/root", True)]
    found = launchers(30000, root=debian)
    assert [(os.path.relpath(r["path"], debian), r["lineno"]) for r in found] == [("var/spool/cron/crontabs/root", 2)]
    assert found[0]["line"] == "@reboot nohup %s &" % SERVER  # the hourly line is no boot launcher
    found = launchers(30001, root=debian)
    assert [(os.path.relpath(r["path"], debian), r["lineno"]) for r in found] == [("etc/rc.local", 2)]


def test_the_rhel_family_crontab_and_rc_d_rc_local_are_read_once(rhel):
    rel = [(os.path.relpath(p, rhel), crontab) for p, crontab in boot_files(rhel)]
    # /etc/rc.local is a link to /etc/rc.d/rc.local: read (and disabled) once, at the real file
    assert rel == [("etc/rc.d/rc.local", False), ("etc/cron.d/0hourly", True), ("var/spool/cron/root", True)]
    assert [(os.path.relpath(r["path"], rhel), r["lineno"]) for r in launchers(30000, root=rhel)] == [("etc/rc.d/rc.local", 3)]
    assert [(os.path.relpath(r["path"], rhel), r["lineno"]) for r in launchers(30001, root=rhel)] == [("var/spool/cron/root", 1)]


def test_a_wrappers_script_counts_and_other_ports_do_not(rhel):
    with open(os.path.join(rhel, "var/spool/cron/root"), "a") as f:
        f.write("@reboot /root/keep-serving.sh\n@reboot %s\n" % SERVER.replace("30000", "30002"))
    found = launchers(30009, scripts=["/root/keep-serving.sh"], root=rhel)
    assert [r["lineno"] for r in found] == [2]
    assert launchers(30009, root=rhel) == []


def test_the_lines_a_cutover_disabled_are_found_in_either_layout(debian, rhel):
    for root, path in ((debian, "var/spool/cron/crontabs/root"), (rhel, "var/spool/cron/root")):
        with open(os.path.join(root, path), "a") as f:
            f.write(MARK + "@reboot x\n")
        assert disabled_launchers("sglang-30000.service", root=root) == [os.path.join(root, path)]
        assert disabled_launchers("sglang-30001.service", root=root) == []


def test_an_empty_host_has_no_launchers(tmp_path):
    assert boot_files(str(tmp_path)) == [] and launchers(30000, root=str(tmp_path)) == []
