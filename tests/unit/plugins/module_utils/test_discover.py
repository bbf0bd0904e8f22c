"""Finding a server by its port among decoys: another server, an operator's tail and watch, a wrapper loop."""
import os
import shlex
import socket
import sys

import pytest

from ansible_collections.inferops.sglang.plugins.module_utils import _discover, _procfs
from tests.unit.conftest import free_port, wait_for
from .conftest import server_cmd, wait_listening


def test_family_by_port_among_decoys(shell, tmp_path):
    a, b = free_port(), free_port()
    # a.log made first: a `tail -f` started before the server's redirect made it would exit at once
    shell(": > a.log; SGLANG_DOUBLE_FAULTS=untitled_orphan %s > a.log 2>&1 & tail -f a.log > /dev/null & "
          "bash -c 'exec -a \"watch pgrep -f sglang.launch_server\" sleep 600' & wait" % server_cmd(a))
    shell("%s > b.log 2>&1 & wait" % server_cmd(b))
    (server_a,) = wait_listening(a)
    (server_b,) = wait_listening(b)
    procs = _procfs.snapshot()
    assert _procfs.read(server_a).cmdline.endswith("--port %d" % a)
    fam = _discover.family(procs[server_a], procs, others=[server_b])
    cmd = dict((pid, procs[pid].cmdline) for pid in fam)
    titles = sorted(c for c in cmd.values() if c.startswith("sglang::"))
    assert titles == ["sglang::detokenizer", "sglang::scheduler_TP0", "sglang::scheduler_TP1"]
    assert [c for c in cmd.values() if "spawn_main" in c], "the untitled orphan that left the group is family"
    assert [c for c in cmd.values() if "resource_tracker" in c]
    assert not [c for c in cmd.values() if c.startswith(("tail", "watch", "bash"))], cmd
    assert server_b not in fam and not set(_procfs.descendants(procs, [server_b])) & set(fam)
    # the decoys really share the server's session and process group
    tail = wait_for(lambda: [p for p in _procfs.snapshot().values() if p.cmdline.startswith("tail -f a.log")])[0]
    assert tail.sid == procs[server_a].sid and tail.pgid == procs[server_a].pgid


def test_nothing_listens():
    assert _discover.listeners(free_port(), _procfs.snapshot()) == []


def test_wrapper_loop_is_reported(shell):
    port = free_port()
    shell("while true; do %s; sleep 1; done" % server_cmd(port))
    (server,) = wait_listening(port)
    w = _discover.wrapper(_procfs.read(server), _procfs.snapshot())
    assert w and w["kind"] == "shell loop" and "while true" in w["cmdline"]


def test_no_wrapper_for_nohup(shell):
    port = free_port()
    shell("nohup %s > s.log 2>&1 &" % server_cmd(port))
    (server,) = wait_listening(port)
    assert _discover.wrapper(_procfs.read(server), _procfs.snapshot()) is None


def test_capture_resolves_a_relative_python_after_activate(shell, tmp_path):
    venv_bin = os.path.dirname(sys.executable)
    port = free_port()
    shell("export PATH=%s:$PATH API_TOKEN=s3cret; python -m sglang.launch_server --model-path /models/m --tp 1 "
          "--port %d --api-key k3y > s.log 2>&1 & wait" % (shlex.quote(venv_bin), port))
    (server,) = wait_listening(port)
    cap = _discover.capture(server)
    assert cap["argv"][0] == "python"
    assert cap["argv0_resolved"] == os.path.join(venv_bin, "python")
    assert cap["exe"] == os.path.realpath(sys.executable) and cap["argv0_matches_exe"]
    assert cap["cwd"] == str(tmp_path) and cap["user"] == "root"
    assert cap["environment"]["API_TOKEN"] == "s3cret" and cap["argv"][-2:] == ["--api-key", "k3y"]


@pytest.mark.parametrize("bind,url", [("0.0.0.0", "http://127.0.0.1:%d"), ("127.0.0.1", "http://127.0.0.1:%d"),
                                      ("::1", "http://[::1]:%d"), ("::", "http://[::1]:%d")])
def test_local_url_of_a_listener(spawn, bind, url):
    port = free_port()
    spawn.python("import http.server, socket, sys\n"
                 "class S(http.server.HTTPServer):\n    address_family = socket.AF_INET6 if ':' in %r else socket.AF_INET\n"
                 "S((%r, %d), http.server.BaseHTTPRequestHandler).serve_forever()" % (bind, bind, port))
    wait_listening(port)
    assert _discover.local_url(port) == url % port
    assert _discover.connections(port) == 0
    with socket.create_connection(("::1" if ":" in bind else "127.0.0.1", port)):
        assert wait_for(lambda: _discover.connections(port) == 1, 5)
    assert _discover.local_url(free_port()) is None


def test_two_servers_of_one_session_never_share_an_orphan(shell):
    """Server A's untitled orphan starts after server B (same venv, same shell session and process group): it is
    A's alone (it shares A's resource tracker pipe), so a cutover of B never touches it."""
    a, b = free_port(), free_port()
    shell("SGLANG_DOUBLE_FAULTS=untitled_orphan %s > a.log 2>&1 & %s > b.log 2>&1 & wait" % (server_cmd(a), server_cmd(b)))
    (server_a,) = wait_listening(a)
    (server_b,) = wait_listening(b)
    procs = _procfs.snapshot()
    fam_a = _discover.family_of(procs[server_a], procs)
    fam_b = _discover.family_of(procs[server_b], procs)
    orphans = [pid for pid in fam_a if "spawn_main" in procs[pid].cmdline and procs[pid].sid != procs[server_a].sid]
    assert len(orphans) == 1, fam_a
    orphan = procs[orphans[0]]
    assert orphan.starttime >= procs[server_b].starttime, "the orphan started after both servers"
    assert not set(fam_a) & set(fam_b), (fam_a, fam_b)
    assert [t for t in (procs[p].cmdline for p in fam_b) if t.startswith("sglang::scheduler")], "B keeps its own"


def test_claimant_ranks_ties(spawn):
    """Without a shared pipe: the process group, then the session, then the latest server started before it."""
    P = _procfs.Process

    def proc(pid, pgid, sid, start):
        return P(pid, 1, pgid, sid, "S", start, 0, "python3", ["python3"], 0)

    a, b = proc(10, 10, 5, 100), proc(20, 20, 5, 200)
    assert _discover.claimant(proc(30, 10, 30, 300), [a, b]) is a, "its process group"
    assert _discover.claimant(proc(30, 30, 5, 300), [a, b]) is b, "same session: the latest started before it"
    assert _discover.claimant(proc(30, 30, 5, 50), [a, b]) is a, "older than both: the earliest of its session"
    assert _discover.claimant(proc(30, 30, 30, 150), [a, b]) is a, "start time alone"
    assert _discover.claimant(proc(30, 30, 30, 50), [a, b]) is None, "older than every server, no tie"


def test_listener_is_the_servers_own(shell, spawn):
    port = free_port()
    shell("%s > s.log 2>&1 & wait" % server_cmd(port))
    (server,) = wait_listening(port)
    assert _discover.listener_problem(port, pid=server) is None
    other = spawn.python("import time; time.sleep(600)")
    why = _discover.listener_problem(port, pid=other.pid)
    assert why and "port %d is held by pid %d" % (port, server) in why and "pid %d's family" % other.pid in why
    assert "nothing that can be read listens" in _discover.listener_problem(free_port(), pid=server)


def test_scheduler_watch_names_a_killed_scheduler(shell):
    port = free_port()
    shell("%s > s.log 2>&1 & wait" % server_cmd(port))
    (server,) = wait_listening(port)
    watch = _discover.SchedulerWatch(pid=server)
    assert watch.problem() is None
    assert len(watch.seen) == 2, "tp 2: two schedulers seen"
    (ident, title) = sorted(watch.seen.items())[0]
    os.kill(ident[0], 9)
    assert wait_for(watch.problem, 10)
    why = watch.problem()
    assert "lost a scheduler" in why and "%s (pid %d)" % (title, ident[0]) in why, why


def test_a_server_started_with_sglang_serve_is_found_with_its_wrapper_loop(shell, tmp_path):
    """The console script every wheel ships: in /proc it reads `PYTHON VENV/bin/sglang serve ...` (the shebang)."""
    script = tmp_path / "bin" / "sglang"
    script.parent.mkdir()
    script.write_text("#!%s\nimport sys\nfrom sglang.cli.main import main\nif __name__ == '__main__':\n    sys.exit(main())\n"
                      % sys.executable)  # as pip writes a console script
    script.chmod(0o755)
    port = free_port()
    shell("while true; do %s serve --model-path /models/m --port %d; sleep 1; done" % (script, port))
    (server,) = wait_listening(port)
    proc = _procfs.read(server)
    assert proc.argv[:3] == [sys.executable, str(script), "serve"]
    assert _discover.is_sglang(proc)
    w = _discover.wrapper(proc, _procfs.snapshot())
    assert w and w["kind"] == "shell loop"
    fam = _discover.family_of(proc, _procfs.snapshot())
    titles = [_procfs.read(p).cmdline for p in fam]
    assert "sglang::scheduler" in titles, titles
    assert not _discover.is_sglang_command("tail -f sglang serve.log") and not _discover.is_sglang_command("sglang servex")
