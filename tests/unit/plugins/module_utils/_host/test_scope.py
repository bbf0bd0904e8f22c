"""_scope: the D-Bus calls as busctl takes them, its answers, the cgroup reading, and the watcher run for real
(a real process watched; systemctl is a stand-in on PATH that records how it was called)."""
import fcntl
import os
import signal
import subprocess
import sys
import time

import pytest

from ansible_collections.inferops.sglang.plugins.module_utils._host import procfs as _procfs, scope as _scope

BUS = ["busctl", "call", "org.freedesktop.systemd1", "/org/freedesktop/systemd1", "org.freedesktop.systemd1.Manager"]


def test_names():
    assert _scope.names("sglang-30000") == ("sglang-30000-adopted.scope", "sglang-30000-adopted-watch.service")


def test_start_argv_is_the_call_busctl_takes():
    argv = _scope.start_argv("s-adopted.scope", [42, "43"], "s.service", 12.5, "adopted s")
    assert argv == BUS + ["StartTransientUnit", "ssa(sv)a(sa(sv))", "s-adopted.scope", "fail", "8",
                          "PIDs", "au", "2", "42", "43",
                          "Description", "s", "adopted s",
                          "KillMode", "s", "mixed",
                          "TimeoutStopUSec", "t", "12500000",
                          "Conflicts", "as", "1", "s.service",
                          "Before", "as", "1", "s.service",
                          "CollectMode", "s", "inactive-or-failed",
                          "Delegate", "b", "true",
                          "0"]


def test_start_argv_refuses_no_pids():
    with pytest.raises(_scope.ScopeError):
        _scope.start_argv("s-adopted.scope", [], "s.service", 1, "d")


def test_attach_argv():
    assert _scope.attach_argv("s-adopted.scope", [7, 8]) == BUS + ["AttachProcessesToUnit", "ssau", "s-adopted.scope",
                                                                   "", "2", "7", "8"]


def test_parse_reply():
    assert _scope.parse_reply('o "/org/freedesktop/systemd1/job/81"\n') == "/org/freedesktop/systemd1/job/81"
    for bad in ("", "Call failed: Unit s-adopted.scope already exists.", 's "x"'):
        with pytest.raises(_scope.ScopeError):
            _scope.parse_reply(bad)


def test_watch_argv():
    argv = _scope.watch_argv("/usr/bin/python3", "s-adopted.scope", "s-adopted-watch.service", "s.service", (42, 99),
                             10, "/var/lib/x/switch.lock")
    assert argv[:5] == ["systemd-run", "--unit", "s-adopted-watch.service", "--collect", "--quiet"]
    assert "--property=PartOf=s-adopted.scope" in argv and "--property=After=s-adopted.scope" in argv
    assert "--property=TimeoutStopSec=25" in argv
    assert argv[-8:] == ["/usr/bin/python3", "-c", _scope.WATCHER, "42", "99", "s.service", "10",
                         "/var/lib/x/switch.lock"]


def proc_with(tmp_path, pid, cgroup, init="0::/init.scope\n"):
    for p, text in ((1, init), (pid, cgroup)):
        d = tmp_path / str(p)
        d.mkdir(exist_ok=True)
        (d / "cgroup").write_text(text)
    return str(tmp_path)


def test_scope_of_unified_and_hybrid(tmp_path):
    proc = proc_with(tmp_path, 2, "0::/system.slice/s-adopted.scope\n")
    assert _scope.scope_of(2, proc) == "s-adopted.scope"
    proc = proc_with(tmp_path, 3, "9:name=systemd:/libpod-x/system.slice/s-adopted.scope\n8:pids:/libpod-x\n"
                                  "0::/libpod-x/system.slice/s-adopted.scope\n", init="0::/libpod-x/init.scope\n")
    assert _scope.scope_of(3, proc) == "s-adopted.scope"
    proc = proc_with(tmp_path, 4, "0::/user.slice/user-0.slice/session-4.scope\n", init="0::/init.scope\n")
    assert _scope.scope_of(4, proc) == "session-4.scope"
    proc = proc_with(tmp_path, 5, "0::/system.slice/s.service\n")
    assert _scope.scope_of(5, proc) is None
    assert _scope.scope_of(6, proc) is None  # gone


def test_a_users_own_scope_of_that_name_is_not_the_adopted_one(tmp_path):
    """A user with a manager of their own makes `systemd-run --user --scope --unit s-adopted`: the scope the system's
    manager sees is user@1000.service, not s-adopted.scope."""
    proc = proc_with(tmp_path, 7, "0::/user.slice/user-1000.slice/user@1000.service/app.slice/s-adopted.scope\n")
    assert _scope.scope_of(7, proc) is None


def test_since(tmp_path):
    (tmp_path / "stat").write_text("cpu  1 2 3\nbtime 1796000000\nprocesses 5\n")
    assert _scope.since(os.sysconf("SC_CLK_TCK") * 10, str(tmp_path)) == 1796000010.0


@pytest.fixture()
def watched(tmp_path):
    """A real process to watch, a systemctl stand-in that records its argv, and the watcher's argv."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    calls = tmp_path / "calls"
    (bindir / "systemctl").write_text("#!/bin/sh\necho \"$@\" >> %s\n" % calls)
    (bindir / "systemctl").chmod(0o755)
    server = subprocess.Popen([sys.executable, "-c", "import signal, sys, time\n"
                               "signal.signal(signal.SIGTERM, lambda *a: (open(%r, 'w').write('TERM'), sys.exit(0)))\n"
                               "time.sleep(60)" % str(tmp_path / "server-term")])
    time.sleep(0.2)
    env = dict(os.environ, PATH="%s:%s" % (bindir, os.environ["PATH"]))
    lock = str(tmp_path / "switch.lock")

    def start():
        return subprocess.Popen([sys.executable, "-c", _scope.WATCHER, str(server.pid),
                                 str(_procfs.starttime(server.pid)), "s.service", "5", lock], env=env)
    yield server, start, calls, tmp_path, lock
    server.kill()
    server.wait()


def test_the_watcher_starts_the_service_when_the_server_ends(watched):
    server, start, calls, dummy, dummy = watched
    watcher = start()
    time.sleep(0.3)
    assert watcher.poll() is None and not calls.exists()
    server.kill()
    server.wait()
    assert watcher.wait(5) == 0
    assert calls.read_text() == "start --no-block s.service\n"


def test_the_watcher_stopped_drains_the_server_and_starts_nothing(watched):
    server, start, calls, tmp, dummy = watched
    watcher = start()
    time.sleep(0.3)
    watcher.send_signal(signal.SIGTERM)
    assert watcher.wait(5) == 0
    assert server.wait(5) == 0 and (tmp / "server-term").read_text() == "TERM"
    assert not calls.exists()


def test_the_watcher_leaves_a_switch_alone(watched):
    server, start, calls, dummy, lock = watched
    watcher = start()
    fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        server.kill()
        server.wait()
        assert watcher.wait(5) == 0
    finally:
        os.close(fd)
    assert not calls.exists()
