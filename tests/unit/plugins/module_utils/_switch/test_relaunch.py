"""The rollback's relaunch: the captured command started again exactly as it ran, as its own user, never writing
through that user's links."""
import os
import signal
import subprocess
import sys

import pytest

from ansible_collections.inferops.sglang.plugins.module_utils._server import (
    capture as _capture, listeners as _listeners)
from ansible_collections.inferops.sglang.plugins.module_utils._host import procfs as _procfs, signals as _signals
from ansible_collections.inferops.sglang.plugins.module_utils._switch import (
    outcome as _switch_outcome, relaunch as _relaunch, worker as _switch_worker)

from tests.unit.conftest import free_port, wait_for
from ..conftest import NOBODY, Systemctl, server_cmd, wait_listening


def test_back_to_the_capture_starts_it_exactly_as_it_ran(shell, tmp_path):
    """A rollback: the captured command again, with its argv (argv[0] as typed), environment, cwd and log."""
    port = free_port()
    shell("cd %s && export PATH=%s:$PATH && INFEROPS_MARK='a b \"c\"' nohup %s > srv.log 2>&1 & wait" % (
        tmp_path, os.path.dirname(sys.executable), server_cmd(port, "python3")))
    (pid,) = wait_listening(port)
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    cap = _capture.capture(pid)
    assert cap["stdout"] == cap["stderr"] == str(tmp_path / "srv.log")
    _switch_outcome.write_json(str(state / "capture.json"), cap)
    _signals.stop([_procfs.read(pid)], grace=10)
    wait_for(lambda: not _listeners.listeners(port, _procfs.snapshot()), 10)
    size = (tmp_path / "srv.log").stat().st_size
    plan = dict(id="t5", action="rollback", target="capture", port=port, unit="sglang.service", unit_name="sglang",
                state_dir=str(state), drain=1.0, release_strays=False, devices=[str(tmp_path / "nvidia*")])
    systemctl = Systemctl()
    outcome = _switch_worker.Worker(plan, run=systemctl).go()
    assert outcome["error"] is None, outcome
    assert [s["step"] for s in outcome["steps"]] == ["stop server", "verify zero", "release GPUs", "start captured command"]
    assert ["systemctl", "stop", "sglang.service"] in systemctl.calls
    (again,) = wait_listening(port)
    assert again == outcome["pid_started"] != pid
    assert _procfs.read(again).argv == cap["argv"] and cap["argv"][0] == "python3"
    assert _procfs.environ(again) == cap["environment"] and _procfs.environ(again)["INFEROPS_MARK"] == 'a b "c"'
    assert os.readlink("/proc/%d/cwd" % again) == str(tmp_path)
    assert os.readlink("/proc/%d/fd/1" % again) == str(tmp_path / "srv.log")
    wait_for(lambda: (tmp_path / "srv.log").stat().st_size > size, 10)  # appended, not truncated
    assert (tmp_path / "srv.log").read_text().count("server_args=") == 2
    proc = _procfs.read(again)
    assert proc.sid == again, "a session of its own, as nohup and a closed terminal leave it"


def _started(state, cap):
    """The relaunch of cap (written to state/capture.json): what it returns, once the started process wrote."""
    _switch_outcome.write_json(str(state / "capture.json"), cap)
    detail = _relaunch.relaunch(str(state))
    STARTED.append(detail["pid"])
    return detail


STARTED = []


@pytest.fixture(autouse=True)
def _reap():
    yield
    while STARTED:
        pid = STARTED.pop()
        try:
            os.killpg(pid, signal.SIGKILL)
        except OSError:
            pass


def owners_command(folder, log, **kw):
    """A capture of a command nobody ran in folder, its output to log."""
    return dict(dict(argv=["sh", "-c", "echo started; id -u; exec sleep 30"], argv0_resolved="/bin/sh",
                     exe=os.path.realpath("/bin/sh"), argv0_matches_exe=True,
                     environment={"PATH": "/usr/bin:/bin"}, cwd=str(folder), uid=NOBODY.pw_uid, gid=NOBODY.pw_gid,
                     stdout=str(log), stderr=str(log)), **kw)


@pytest.mark.skipif(os.getuid() != 0, reason="needs root: the command is nobody's")
def test_a_log_linked_to_a_root_only_file_gets_nothing(tmp_path, home):
    """nobody's nohup.out is a link to a root-only file: the relaunch writes nothing there (the output goes to
    /dev/null, and the result says no log)."""
    secret = tmp_path / "root-only"
    secret.write_text("root's\n")
    secret.chmod(0o600)
    (home / "nohup.out").symlink_to(secret)
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    detail = _started(state, owners_command(home, home / "nohup.out"))
    wait_for(lambda: os.readlink("/proc/%d/exe" % detail["pid"]).endswith("sleep"), 10)
    assert secret.read_text() == "root's\n" and detail["log"] is None
    assert os.readlink("/proc/%d/fd/1" % detail["pid"]) == "/dev/null"
    assert _procfs.read(detail["pid"]).uid == NOBODY.pw_uid


@pytest.mark.skipif(os.getuid() != 0, reason="needs root: the command is nobody's")
def test_a_dangling_log_link_creates_nothing_and_a_missing_log_is_created_as_the_user(tmp_path, home):
    cron = tmp_path / "cron.d"  # stands in for /etc/cron.d
    cron.mkdir()
    (home / "nohup.out").symlink_to(cron / "x")
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    detail = _started(state, owners_command(home, home / "nohup.out"))
    wait_for(lambda: os.readlink("/proc/%d/exe" % detail["pid"]).endswith("sleep"), 10)
    assert not (cron / "x").exists() and list(cron.iterdir()) == [] and detail["log"] is None
    detail = _started(state, owners_command(home, home / "new.log"))
    wait_for(lambda: (home / "new.log").exists() and (home / "new.log").read_text() == "started\n%d\n" % NOBODY.pw_uid, 10)
    assert (home / "new.log").stat().st_uid == NOBODY.pw_uid and detail["log"] == str(home / "new.log")


@pytest.mark.skipif(os.getuid() != 0, reason="needs root: the wrapper is nobody's")
def test_a_wrapper_loop_is_started_again_as_its_own_user_not_the_servers(tmp_path, spawn):
    """nobody's shell loop around a server root runs (as one started with sudo would be), with a group of its own
    (gid 4242, not nobody's primary): the relaunch starts the loop as nobody with gid 4242, never as root."""
    loop = subprocess.Popen(["setpriv", "--reuid=nobody", "--regid=4242", "--clear-groups", "sh", "-c",
                             "while true; do sleep 30; done # %s" % spawn.marker], cwd="/", stdin=subprocess.DEVNULL)
    spawn.procs.append(loop)
    server = spawn.python("import time; time.sleep(60)")
    wait_for(lambda: _procfs.read(loop.pid) and _procfs.read(loop.pid).uid == NOBODY.pw_uid and
             _procfs.read(loop.pid).argv[:1] == ["sh"], 10)
    cap = dict(_capture.capture(server.pid), wrapper=_capture.capture(loop.pid))
    assert cap["uid"] == 0 and (cap["wrapper"]["uid"], cap["wrapper"]["gid"]) == (NOBODY.pw_uid, 4242)
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    detail = _started(state, cap)
    assert detail["wrapper"] is True
    wait_for(lambda: _procfs.read(detail["pid"]) is not None, 10)
    with open("/proc/%d/status" % detail["pid"]) as f:
        ids = dict(line.split(":", 1) for line in f if line.startswith(("Uid", "Gid")))
    assert ids["Uid"].split() == [str(NOBODY.pw_uid)] * 4 and ids["Gid"].split() == ["4242"] * 4


@pytest.mark.skipif(os.getuid() != 0, reason="needs root: the folder is nobody's")
def test_a_root_commands_log_is_opened_only_in_a_folder_no_other_user_can_change(tmp_path, public_dir, home):
    """Root's command logs to a sticky folder every user can write (as /tmp): appended; to a folder of nobody's (who
    could swap the file for a link to anything): not opened."""
    sticky = public_dir / "tmp"
    sticky.mkdir()
    sticky.chmod(0o1777)
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    root_cmd = dict(uid=0, gid=0, cwd="/")
    detail = _started(state, owners_command("/", sticky / "root.log", **root_cmd))
    wait_for(lambda: (sticky / "root.log").exists() and (sticky / "root.log").read_text() == "started\n0\n", 10)
    assert detail["log"] == str(sticky / "root.log") and (sticky / "root.log").stat().st_uid == 0
    detail = _started(state, owners_command("/", home / "root.log", **root_cmd))
    wait_for(lambda: os.readlink("/proc/%d/exe" % detail["pid"]).endswith("sleep"), 10)
    assert detail["log"] is None and not (home / "root.log").exists()


@pytest.mark.skipif(os.getuid() != 0, reason="needs root: the payload is nobody's")
def test_a_refused_capture_is_never_started(tmp_path, home):
    """A setuid program's capture (su with nobody's payload as argv[0], effective uid 0 taken for the user), and root's
    command in nobody's folder: the relaunch refuses both, naming why; the payload never runs."""
    payload = home / "payload"
    payload.write_text("#!/bin/sh\nid -u >> %s/ran\nexec sleep 30\n" % home)
    payload.chmod(0o755)
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    su = owners_command(home, home / "x.log", argv=[str(payload), "root", "-c", "x", "-m", "sglang.launch_server"],
                        argv0_resolved=str(payload), exe="/usr/bin/su", argv0_matches_exe=False, uid=0, gid=0,
                        ids={"uid": [NOBODY.pw_uid, 0, 0, 0], "gid": [NOBODY.pw_gid] * 4})
    with pytest.raises(RuntimeError) as e:
        _started(state, su)
    assert str(e.value).startswith("the captured command is not started again: the process runs with differing ids: uid "
                                   "real %d, effective 0" % NOBODY.pw_uid)
    assert "is not the program it runs, /usr/bin/su" in str(e.value)
    with pytest.raises(RuntimeError, match="the server would run as root, and another user can change what root would "
                                           "run or read: the working directory %s: %s is owned by nobody" % (home, home)):
        _started(state, owners_command(home, home / "x.log", uid=0, gid=0))
    assert not (home / "ran").exists() and not (home / "x.log").exists()
