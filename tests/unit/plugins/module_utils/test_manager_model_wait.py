"""model_wait's manager against the SGLang double on loopback: ready, behind a key, a process that dies or loses a
scheduler, a unit that failed (systemd's answers given: it is not PID 1 here), and what it refuses."""
import os
import threading
import time

import pytest

from ansible_collections.inferops.sglang.plugins.module_utils._server import family as _family
from ansible_collections.inferops.sglang.plugins.module_utils._host import procfs as _procfs
from ansible_collections.inferops.sglang.plugins.module_utils._manager_model_wait import ModelWait

from .conftest import Exited, Failed, FakeModule, free_port


class Module(FakeModule):
    """What the manager uses of AnsibleModule."""

    defaults = dict(url="http://127.0.0.1:30000", timeout=60.0, ready="auto", models=True, generate=False, api_key=None,
                    pid=None, unit=None, log_file=None, lines=20, redact=[])


class FailedUnit(Module):
    """A host whose systemd says the unit failed, and whose journal holds its last lines."""

    def __init__(self, load_state="loaded", **params):
        Module.__init__(self, **params)
        self.load_state = load_state
        self.asked = []

    def run_command(self, argv):
        self.asked.append(argv)
        if "systemctl" in argv:
            return 0, ("LoadState=%s\nActiveState=failed\nSubState=failed\nNRestarts=0\nResult=exit-code\n"
                       "MainPID=0\nExecMainStatus=1\nExecMainCode=1\n" % self.load_state), ""
        if "journalctl" in argv:
            return 0, "loading weights\nstarted with --api-key sk-in-the-journal\nRuntimeError: CUDA error\n", ""
        return Module.run_command(self, argv)


def failure(module):
    with pytest.raises(Failed) as e:
        ModelWait(module).run()
    return e.value.args[0]


def gone_pid():
    with open("/proc/sys/kernel/pid_max") as f:
        return int(f.read()) + 1


def test_ready_with_the_servers_pid_watched(server, spawn):
    p = server()
    with pytest.raises(Exited) as e:
        ModelWait(Module(url=p.url, pid=p.pid, generate=True)).run()
    r = e.value.args[0]
    assert not r.get("failed") and not r["changed"] and r["url"] == p.url and r["model"] == spawn.marker
    assert r["generated"] and r["ready_path"] == "/ready" and r["phases"]["loading"] >= 0.9
    assert r["msg"] == "ready after %.1f s serving %s" % (r["ready_after"], spawn.marker)


def test_a_key_the_server_wants_is_given_and_never_shown(server, spawn):
    p = server("--api-key", "sk-secret")
    out = failure(Module(url=p.url, timeout=30))
    assert "401" in out["msg"] and "give api_key" in out["msg"]
    with pytest.raises(Exited) as e:
        ModelWait(Module(url=p.url, pid=p.pid, api_key="sk-secret", redact=["--api-key"], timeout=30)).run()
    assert e.value.args[0]["model"] == spawn.marker and "sk-secret" not in str(e.value.args[0])
    out = failure(Module(url=p.url, api_key="sk-secret", timeout=30))
    assert out["msg"] == ("an API key for the server at %s on this host goes only to the server's own listener: say "
                          "whose it is (its unit or pid)" % p.url), "whose listener would get it is unknown"


def test_a_server_that_dies_while_loading_fails_at_once_with_its_log(server, tmp_path):
    p = server(faults="crash_during_load", load_seconds=2)
    out = failure(Module(url=p.url, pid=p.pid, log_file=str(tmp_path / "log"), lines=5))
    assert "pid %d exited" % p.pid in out["msg"] and out["phase"] == "loading"
    assert out["log_lines"] and len(out["log_lines"]) <= 5 and out["log_lines"] == (tmp_path / "log").read_text().splitlines()[-5:]


def test_a_lost_scheduler_fails_the_wait_on_a_version_that_never_notices(server, monkeypatch):
    """0.5.9 keeps loading for ever once a scheduler is SIGKILLed: the wait says so instead of timing out."""
    p = server(version="0.5.9", load_seconds=120)
    seen = threading.Event()
    real = _family.SchedulerWatch.problem

    def problem(watch):
        why = real(watch)
        if watch.seen:
            seen.set()
        return why
    monkeypatch.setattr(_family.SchedulerWatch, "problem", problem)

    def kill_a_scheduler():
        if seen.wait(60):
            procs = _procfs.snapshot()
            (sched,) = [q for q in _family.family_of(procs[p.pid], procs) if procs[q].cmdline.startswith("sglang::scheduler")]
            os.kill(sched, 9)
    killer = threading.Thread(target=kill_a_scheduler)
    killer.start()
    try:
        out = failure(Module(url=p.url, pid=p.pid, timeout=90))
    finally:
        seen.set()
        killer.join()
    assert "the server lost a scheduler: sglang::scheduler (pid " in out["msg"] and out["phase"] == "loading"
    assert p.poll() is None, "the server itself still runs: only the wait could tell"


def test_a_port_another_program_holds_fails_the_wait_at_once(server, impostor):
    """Another program holds the port the server is started on: SGLang binds only once loaded, its bind then fails
    and the real 0.5.15 lives on for two minutes (its warm-up asking the holder 120 times), ignoring SIGTERM. The
    wait fails as soon as it sees the holder, naming it, instead of waiting out its timeout."""
    port = free_port()
    holder = impostor.start(port)
    p = server(port=port, version="0.5.15", warmup_tries=120)
    t0 = time.monotonic()
    out = failure(Module(url="http://127.0.0.1:%d" % port, pid=p.pid, timeout=60))
    assert time.monotonic() - t0 < 10, out
    assert out["msg"].startswith("port %d is held by pid %d (/usr/bin/python3 -c " % (port, holder.pid))
    assert out["msg"].endswith("not by pid %d's family: the server cannot bind it" % p.pid)
    assert p.poll() is None, "the server itself lives on: only the wait could tell"


def test_a_failed_unit_fails_the_wait_with_its_journal_redacted():
    module = FailedUnit(url="http://127.0.0.1:%d" % free_port(), unit="sglang-30000", lines=2, timeout=60)
    out = failure(module)
    assert out["msg"].startswith("unit sglang-30000 failed (result exit-code): its main process exited with status 1")
    assert out["log_lines"] == ["started with --api-key ********", "RuntimeError: CUDA error"]
    assert ["journalctl", "-u", "sglang-30000", "-n", "2", "--no-pager", "-o", "cat"] in [a[4:] for a in module.asked]


def test_check_mode_waits_for_nothing():
    with pytest.raises(Exited) as e:
        ModelWait(Module(check_mode=True, url="http://127.0.0.1:9", pid=gone_pid())).run()
    assert e.value.args[0] == dict(changed=False, skipped_wait=True, msg="check mode: not waited for http://127.0.0.1:9")


def test_what_cannot_come_up_is_refused_before_any_wait(tmp_path):
    log = tmp_path / "s.log"
    log.write_text("one\ntwo --hf-token hf_abc\n")
    pid = gone_pid()
    out = failure(Module(pid=pid, log_file=str(log)))
    assert out["msg"] == "pid %d is not running: the server cannot come up" % pid
    assert out["log_lines"] == ["one", "two --hf-token ********"]
    assert "log_lines" not in failure(Module(pid=pid))
    assert failure(FailedUnit(load_state="not-found", unit="nope"))["msg"] == "cannot watch unit nope: unit nope does not exist"
    assert "not an http" in failure(Module(url="localhost:30000"))["msg"]
    assert failure(Module(timeout=0))["msg"] == "timeout must be > 0 seconds"
