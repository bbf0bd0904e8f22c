"""What a server runs, captured from /proc."""
import os
import shlex
import subprocess
import sys

import pytest

from ansible_collections.inferops.sglang.plugins.module_utils._host import procfs as _procfs
from ansible_collections.inferops.sglang.plugins.module_utils._server import capture as _capture
from tests.unit.conftest import free_port, wait_for
from ..conftest import NOBODY, wait_listening


def test_capture_resolves_a_relative_python_after_activate(shell, tmp_path):
    venv_bin = os.path.dirname(sys.executable)
    port = free_port()
    shell("export PATH=%s:$PATH API_TOKEN=s3cret; python -m sglang.launch_server --model-path /models/m --tp 1 "
          "--port %d --api-key k3y > s.log 2>&1 & wait" % (shlex.quote(venv_bin), port))
    (server,) = wait_listening(port)
    cap = _capture.capture(server)
    assert cap["argv"][0] == "python"
    assert cap["argv0_resolved"] == os.path.join(venv_bin, "python")
    assert cap["exe"] == os.path.realpath(sys.executable) and cap["argv0_matches_exe"]
    assert cap["cwd"] == str(tmp_path) and cap["user"] == "root"
    assert cap["environment"]["API_TOKEN"] == "s3cret" and cap["argv"][-2:] == ["--api-key", "k3y"]


# The port's holder is not who its argv says (issue 40, finding 1): a setuid program keeps the listening socket of the
# user who bound the port, with an argv[0] of theirs; a user retitles argv[0] with exec -a.

SU_HOLDER = r"""
import os, socket, sys
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", int(sys.argv[1])))
s.listen(5)
s.set_inheritable(True)
r, w = os.pipe()  # su waits for ever on a password that never comes
os.dup2(r, 0)
os.set_inheritable(w, True)
os.execv("/usr/bin/su", sys.argv[2:])
"""


@pytest.fixture
def su_holder(spawn, home):
    """nobody binds a port, keeps the listening socket across exec and execs su (setuid root) with an argv of its
    choosing; (pid, port) once su listens on the port with effective uid 0."""
    def start(*argv):
        port = free_port()
        p = subprocess.Popen(["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", "/usr/bin/python3",
                              "-c", SU_HOLDER, str(port)] + list(argv), cwd=str(home), stdin=subprocess.DEVNULL,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        spawn.procs.append(p)
        wait_for(lambda: exe_of(p.pid) == "/usr/bin/su" and wait_listening(port), 10)
        return p.pid, port
    return start


def exe_of(pid):
    try:
        return os.readlink("/proc/%d/exe" % pid)
    except OSError:
        return None


SU_ARGVS = [lambda home: [str(home / "payload"), "root", "-c", "x", "-m", "sglang.launch_server"],
            lambda home: ["/bin/sh", "root", "-c", "x", "-m", "sglang.launch_server"]]


@pytest.mark.skipif(os.getuid() != 0 or not os.path.exists("/usr/bin/su"), reason="needs root and su: nobody's setuid")
@pytest.mark.parametrize("argv", SU_ARGVS, ids=["payload", "sh-root"])
def test_a_setuid_program_on_the_port_is_its_callers_and_refused(su_holder, home, argv):
    (home / "payload").write_text("#!/bin/sh\nid -u > %s/ran\n" % home)
    (home / "payload").chmod(0o755)
    pid, port = su_holder(*argv(home))
    assert _procfs.ids(pid)["uid"] == (NOBODY.pw_uid, 0, 0, 0)
    assert _procfs.read(pid).uid == NOBODY.pw_uid  # the real uid: not /proc/PID's owner
    cap = _capture.capture(pid)
    assert (cap["uid"], cap["user"], cap["gid"]) == (NOBODY.pw_uid, "nobody", NOBODY.pw_gid)
    assert cap["ids"] == {"uid": [NOBODY.pw_uid, 0, 0, 0], "gid": [NOBODY.pw_gid] * 4}
    assert cap["argv0_matches_exe"] is False
    refusals = _capture.refusals(cap)
    assert refusals[0] == ("pid %d runs with differing ids: uid real %d, effective 0, saved 0, filesystem 0 (a setuid or "
                           "setgid program: who it runs as is not who started it) (the server)" % (pid, NOBODY.pw_uid))
    assert refusals[1].startswith("the argv[0] of the server (pid %d), %s (resolved: %s), is not the program it runs, "
                                  "/usr/bin/su" % (pid, cap["argv"][0], cap["argv0_resolved"]))
    assert len(refusals) == 2 and _capture.refusals(cap, user="nobody") == refusals


def test_an_argv0_rewritten_with_exec_a_is_refused_naming_both(shell, tmp_path):
    """exec -a gives a python any argv[0]: a file of the caller's is not what runs."""
    port = free_port()
    (tmp_path / "payload").write_text("#!/bin/sh\n")
    listen = "import socket, time; s = socket.socket(); s.bind(('127.0.0.1', %d)); s.listen(); time.sleep(60)" % port
    shell("exec -a %s /usr/bin/python3 -c %s sglang.launch_server" % (tmp_path / "payload", shlex.quote(listen)))
    (pid,) = wait_listening(port)
    cap = _capture.capture(pid)
    assert cap["argv"][0] == str(tmp_path / "payload") and cap["exe"] == os.path.realpath("/usr/bin/python3")
    assert cap["argv0_matches_exe"] is False
    assert _capture.identity_problems(cap) == [
        "the argv[0] of the server (pid %d), %s (resolved: %s), is not the program it runs, %s: what it runs cannot be "
        "told from its command line" % (pid, tmp_path / "payload", tmp_path / "payload", cap["exe"])]


def test_a_script_whose_shebang_names_the_executable_is_argv0():
    script = "/tmp/inferops-shebang-%d" % os.getpid()
    with open(script, "w") as f:
        f.write("#!%s\n" % sys.executable)
    try:
        assert _capture.argv0_is_exe(script, os.path.realpath(sys.executable))
        assert not _capture.argv0_is_exe(script, "/usr/bin/su")
        assert _capture.argv0_is_exe(sys.executable, os.path.realpath(sys.executable) + " (deleted)")
        assert not _capture.argv0_is_exe(None, "/usr/bin/su")
    finally:
        os.unlink(script)


def test_ids_from_a_status_file(tmp_path):
    """A process whose ids differ (as a setgid program's), read from a status file."""
    status = tmp_path / "status"
    status.write_text("Name:\tunix_chkpwd\nUid:\t1000\t1000\t1000\t1000\nGid:\t1000\t42\t42\t42\nGroups:\t\n")
    found = _procfs.ids(77, str(status))
    assert found == {"uid": (1000,) * 4, "gid": (1000, 42, 42, 42)}
    assert _procfs.ids_problem(found, 77) == ("pid 77 runs with differing ids: gid real 1000, effective 42, saved 42, "
                                              "filesystem 42 (a setuid or setgid program: who it runs as is not who "
                                              "started it)")
    assert _procfs.ids_problem({"uid": (0,) * 4, "gid": (0,) * 4}) is None
    status.write_text("Name:\tx\n")
    assert _procfs.ids(77, str(status)) is None and "cannot be read" in _procfs.ids_problem(None, 77)


def _root_capture(**kw):
    return dict(dict(pid=1, argv=["/usr/bin/python3", "-m", "sglang.launch_server"], argv0_resolved="/usr/bin/python3",
                     exe=os.path.realpath("/usr/bin/python3"), argv0_matches_exe=True, cwd="/",
                     environment={"PATH": "/usr/bin:/bin"}, uid=0, gid=0,
                     ids={"uid": [0] * 4, "gid": [0] * 4}), **kw)


@pytest.mark.skipif(os.getuid() != 0, reason="needs root: the folders are nobody's")
def test_a_root_capture_is_refused_when_another_user_can_change_what_root_would_run(home):
    """Root's server run from nobody's folder, with nobody's folders on PYTHONPATH, LD_PRELOAD and PATH before the
    executable's: each named; refused unless the unit runs as someone else (cutover_user, cutover_group)."""
    assert _capture.refusals(_root_capture()) == []
    (home / "lib.so").touch()
    bad = _root_capture(cwd=str(home), environment={
        "PATH": "%s/bin:/usr/bin:%s/after" % (home, home), "PYTHONPATH": str(home), "LD_PRELOAD": "%s/lib.so" % home})
    (refusal,) = _capture.refusals(bad)
    assert refusal.startswith("the server would run as root, and another user can change what root would run or read: ")
    for part in ("the working directory %s: %s is owned by nobody" % (home, home),
                 "PYTHONPATH's entry %s: %s is owned by nobody" % (home, home),
                 "LD_PRELOAD's entry %s/lib.so: %s is owned by nobody" % (home, home),
                 "PATH's entry %s/bin: %s is owned by nobody" % (home, home)):
        assert part in refusal
    assert "after" not in refusal  # after the executable's folder
    assert refusal.endswith("Name the user it runs as (cutover_user, cutover_group), or make these root's alone")
    assert _capture.refusals(bad, user="nobody") == _capture.refusals(bad, group="nogroup") == []
    script = home / "sglang"
    script.write_text("#!/usr/bin/python3\n")
    (refusal,) = _capture.refusals(_root_capture(argv=[str(script), "serve"], argv0_resolved=str(script),
                                                 argv0_matches_exe=True))
    assert "the executable %s: %s is owned by nobody" % (script, home) in refusal
