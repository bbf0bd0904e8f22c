"""Boot launchers in fixture trees of both layouts: Debian (crontabs/, /etc/rc.local) and the RHEL family
(/var/spool/cron/root, /etc/rc.d/rc.local with /etc/rc.local a link to it)."""
import os
import time

import pytest

from ansible_collections.inferops.sglang.plugins.module_utils._server import boot as _boot
from ansible_collections.inferops.sglang.plugins.module_utils._server.boot import (
    boot_files, disabled_launchers, launchers)

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
    found = launchers(30009, "/root/keep-serving.sh", "root", root=rhel)
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


def test_a_wrapper_script_matches_only_a_line_that_runs_that_very_path(tmp_path):
    """The owner's script is /home/u/run: rc.local lines that merely contain that string are no launchers of it, nor
    is one that runs it as root; su, runuser and sudo to u are."""
    root = tree(tmp_path / "t", {"etc/rc.local": "#!/bin/sh\n/usr/local/bin/backup /home/u/run.d --all\n"
                                                 "echo /home/u/runner >> /var/log/x\n"
                                                 "nohup /home/u/run > /tmp/log 2>&1 &\n"
                                                 "su - u -c '/home/u/run'\n"
                                                 "runuser -u u -- bash /home/u/run &\n"
                                                 "sudo -iu u /home/u/run\n"
                                                 "/usr/local/bin/backup /home/u/run\n"})
    notes = []
    found = launchers(30000, "/home/u/run", "u", root=root, notes=notes)
    assert [r["lineno"] for r in found] == [5, 6, 7]
    rc = os.path.join(root, "etc/rc.local")
    assert notes == ["left alone %s:%d: it names the wrapper's script /home/u/run but does not run it as u" % (rc, n)
                     for n in (4, 8)]
    assert launchers(30000, "/home", "u", root=root) == [] and launchers(30000, "", "u", root=root) == []


def test_the_owner_never_chooses_roots_boot_jobs(tmp_path):
    """The review's case: the owner's loop is `bash -c 'while ...' /usr/local/sbin/hardening.sh`; had the wrapper
    named that file (its $0), root's own @reboot job that runs it, as root, was commented out. A line runs the
    wrapper's script only as the wrapper's user: root's job, and a line that hands the script over as an argument, are
    left alone, whichever user runs them."""
    root = tree(tmp_path / "t", {
        "etc/cron.d/hardening": "@reboot root /usr/local/sbin/hardening.sh --lock-down\n",
        "etc/crontab": "@reboot alice bash -c 'sleep 1' /usr/local/sbin/hardening.sh\n"
                       "@reboot alice /usr/local/sbin/hardening.sh\n",
        "var/spool/cron/crontabs/root": "@reboot /usr/local/sbin/hardening.sh\n",
        "var/spool/cron/crontabs/alice": "@reboot nohup /usr/local/sbin/hardening.sh &\n"})
    found = launchers(30000, "/usr/local/sbin/hardening.sh", "alice", root=root)
    assert sorted((os.path.relpath(r["path"], root), r["lineno"]) for r in found) == [
        ("etc/crontab", 2), ("var/spool/cron/crontabs/alice", 1)]
    assert launchers(30000, "/usr/local/sbin/hardening.sh", None, root=root) == []


def test_the_last_port_of_a_line_is_the_one_sglang_serves(tmp_path):
    """argparse takes the last --port (either spelling): a line that gives 30001 then 30000 serves 30000."""
    root = tree(tmp_path / "t", {"etc/rc.local": "%s --port 30001 &\n%s --port=30002 &\n" % (
        SERVER.replace("--port 30000", "--port 30009"), SERVER.replace("--port 30000", "--port=30000"))})
    assert [r["lineno"] for r in launchers(30001, root=root)] == [1]
    assert [r["lineno"] for r in launchers(30002, root=root)] == [2]
    assert launchers(30009, root=root) == [] and launchers(30000, root=root) == []


def test_a_binary_or_non_utf8_boot_file_is_skipped_with_a_note(tmp_path):
    root = tree(tmp_path / "t", {"etc/rc.local": "%s &\n" % SERVER})
    (tmp_path / "t" / "etc" / "cron.d").mkdir()
    (tmp_path / "t" / "etc" / "cron.d" / "tool").write_bytes(b"\x7fELF\x02\x01\x00\x00@reboot")
    (tmp_path / "t" / "etc" / "cron.d" / "latin1").write_bytes(b"@reboot caf\xe9 %s\n" % SERVER.encode())
    notes = []
    assert [r["lineno"] for r in launchers(30000, root=root, notes=notes)] == [1]
    assert notes == ["skipped %s/etc/cron.d/latin1 is not UTF-8 text" % root,
                     "skipped %s/etc/cron.d/tool is a binary file" % root]


def test_a_fifo_in_place_of_a_boot_file_is_skipped_without_waiting(tmp_path, monkeypatch):
    """A FIFO swapped in after the listing (boot_files saw a regular file) is skipped at once, with a note."""
    root = tree(tmp_path / "t", {"etc/rc.local": "%s &\n" % SERVER})
    rc = tmp_path / "t" / "etc" / "rc.local"
    listed = boot_files(root)
    rc.unlink()
    os.mkfifo(str(rc))
    monkeypatch.setattr(_boot, "boot_files", lambda root: listed)
    notes = []
    t0 = time.monotonic()
    assert launchers(30000, root=root, notes=notes) == []
    assert time.monotonic() - t0 < 5 and notes == ["skipped %s is not a regular file" % rc]
