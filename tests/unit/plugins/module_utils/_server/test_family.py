"""A server's family found among decoys: another server, an operator's tail and watch, a wrapper loop; its
schedulers watched."""
import os
import subprocess
import sys
import tempfile

from ansible_collections.inferops.sglang.plugins.module_utils._host import procfs as _procfs
from ansible_collections.inferops.sglang.plugins.module_utils._server import family as _family
from tests.unit.conftest import free_port, wait_for
from ..conftest import nobody_kin, nobody_kin_running, server_cmd, wait_listening


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
    fam = _family.family(procs[server_a], procs, others=[server_b])
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


def test_wrapper_loop_is_reported(shell):
    port = free_port()
    shell("while true; do %s; sleep 1; done" % server_cmd(port))
    (server,) = wait_listening(port)
    w = _family.wrapper(_procfs.read(server), _procfs.snapshot())
    assert w and w["kind"] == "shell loop" and "while true" in w["cmdline"]


def test_a_wrapper_script_that_is_not_utf8_text_is_skipped_not_an_error(shell, tmp_path):
    """The loop's script has a Latin-1 comment: it is not read (no UnicodeDecodeError), so the loop is not told."""
    port = free_port()
    (tmp_path / "run.sh").write_bytes(b"# caf\xe9\nwhile true; do %s; sleep 1; done\n" % server_cmd(port).encode())
    shell("bash %s" % (tmp_path / "run.sh"))
    (server,) = wait_listening(port)
    assert _family.wrapper(_procfs.read(server), _procfs.snapshot()) is None


def test_no_wrapper_for_nohup(shell):
    port = free_port()
    shell("nohup %s > s.log 2>&1 &" % server_cmd(port))
    (server,) = wait_listening(port)
    assert _family.wrapper(_procfs.read(server), _procfs.snapshot()) is None


def test_two_servers_of_one_session_never_share_an_orphan(shell):
    """Server A's untitled orphan starts after server B (same venv, same shell session and process group): it is
    A's alone (it shares A's resource tracker pipe), so a cutover of B never touches it."""
    a, b = free_port(), free_port()
    shell("SGLANG_DOUBLE_FAULTS=untitled_orphan %s > a.log 2>&1 & %s > b.log 2>&1 & wait" % (server_cmd(a), server_cmd(b)))
    (server_a,) = wait_listening(a)
    (server_b,) = wait_listening(b)
    procs = _procfs.snapshot()
    fam_a = _family.family_of(procs[server_a], procs)
    fam_b = _family.family_of(procs[server_b], procs)
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
    assert _family.claimant(proc(30, 10, 30, 300), [a, b]) is a, "its process group"
    assert _family.claimant(proc(30, 30, 5, 300), [a, b]) is b, "same session: the latest started before it"
    assert _family.claimant(proc(30, 30, 5, 50), [a, b]) is a, "older than both: the earliest of its session"
    assert _family.claimant(proc(30, 30, 30, 150), [a, b]) is a, "start time alone"
    assert _family.claimant(proc(30, 30, 30, 50), [a, b]) is None, "older than every server, no tie"


def test_scheduler_watch_names_a_killed_scheduler(shell):
    port = free_port()
    shell("%s > s.log 2>&1 & wait" % server_cmd(port))
    (server,) = wait_listening(port)
    watch = _family.SchedulerWatch(pid=server)
    assert watch.problem() is None
    assert len(watch.seen) == 2, "tp 2: two schedulers seen"
    (ident, title) = sorted(watch.seen.items())[0]
    os.kill(ident[0], 9)
    assert wait_for(watch.problem, 10)
    why = watch.problem()
    assert "lost a scheduler" in why and "%s (pid %d)" % (title, ident[0]) in why, why


def test_the_watch_is_the_servers_tree_not_an_orphan_of_its_session(shell):
    """A scheduler orphaned in the server's session and process group after it started (another server's of the same
    shell, for the moment between its launcher's kill and its own end) is kin that family() adopts; the watch keeps
    to the server's tree, so that orphan's end is no loss of this server."""
    port = free_port()
    shell("%s > s.log 2>&1 & sleep 0.5; ( exec -a sglang::scheduler_TP0 sleep 600 & ); wait" % server_cmd(port))
    (server,) = wait_listening(port)

    def orphan():
        procs = _procfs.snapshot()
        found = [p.pid for p in procs.values() if p.cmdline == "sglang::scheduler_TP0 600" and p.sid == procs[server].sid]
        return found[0] if found else None
    pid = wait_for(orphan, 10)
    procs = _procfs.snapshot()
    assert pid in _family.family_of(procs[server], procs), "kin of its session, started after it: family() adopts it"
    watch = _family.SchedulerWatch(pid=server)
    assert watch.problem() is None
    assert len(watch.seen) == 2 and pid not in [ident[0] for ident in watch.seen], "tp 2: its own two schedulers"
    os.kill(pid, 9)
    wait_for(lambda: not _procfs.is_alive(procs[pid].identity), 10)
    assert watch.problem() is None


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
    assert _family.is_sglang(proc)
    w = _family.wrapper(proc, _procfs.snapshot())
    assert w and w["kind"] == "shell loop"
    fam = _family.family_of(proc, _procfs.snapshot())
    titles = [_procfs.read(p).cmdline for p in fam]
    assert "sglang::scheduler" in titles, titles
    assert not _family.is_sglang_command("tail -f sglang serve.log") and not _family.is_sglang_command("sglang servex")


def test_the_family_never_crosses_users(shell, folders):
    """Two processes of nobody, started after a root server in its own session: one titled sglang::scheduler, one
    of the server's interpreter with multiprocessing in its argv, both orphans. Neither is of the server's family
    (the switch SIGKILLs the family, and its members skip the selector's refusals)."""
    port = free_port()
    shell("%s > s.log 2>&1 & sleep 0.5; %s; wait" % (server_cmd(port), nobody_kin(folders)))
    (server,) = wait_listening(port)
    theirs = wait_for(nobody_kin_running, 10)
    procs = _procfs.snapshot()
    assert all(p.sid == procs[server].sid and p.ppid not in (server,) for p in theirs), "the server's session"
    fam = _family.family_of(procs[server], procs)
    assert [p for p in fam if procs[p].cmdline.startswith("sglang::scheduler")], "the server's own schedulers are"
    assert not set(p.pid for p in theirs) & set(fam), [procs[p].cmdline for p in fam]


def test_kin_of_the_same_user_needs_the_servers_session_or_cgroup(shell, spawn, cgroups):
    """An orphan of the server's user that left its session (a setsid) is kin while it stays in the server's cgroup
    (the untitled orphan of test_family_by_port_among_decoys); titled sglang:: in another session and another
    cgroup (another login of that user), it is not."""
    port = free_port()
    shell("%s > s.log 2>&1 & wait" % server_cmd(port))
    (server,) = wait_listening(port)
    elsewhere = subprocess.Popen(["bash", "-c", "exec -a sglang::scheduler_TP0 sleep 600"], start_new_session=True,
                                 preexec_fn=cgroups.enter("session-9.scope"))
    spawn.procs.append(elsewhere)
    here = subprocess.Popen(["bash", "-c", "exec -a sglang::detokenizer sleep 600"], start_new_session=True)
    spawn.procs.append(here)
    wait_for(lambda: _procfs.read(elsewhere.pid).cmdline.startswith("sglang::")
             and _procfs.read(here.pid).cmdline.startswith("sglang::"))
    procs = _procfs.snapshot()
    assert cgroups.of(elsewhere.pid) == cgroups.path("session-9.scope") != cgroups.of(server)
    assert _family.is_kin(procs[here.pid], procs[server]), "same user, same cgroup: the orphan rules decide"
    assert not _family.is_kin(procs[elsewhere.pid], procs[server])


LOOP = "# sglang.launch_server --port 30000, again and again\nwhile true; do sleep 600; done\n"


def _loop_child(shell_pid):
    """The `sleep 600` a loop's shell runs, as the server the wrapper is asked about."""
    found = wait_for(lambda: [p for p in _procfs.snapshot().values()
                              if p.ppid == shell_pid and p.cmdline == "sleep 600"], 10)
    return found[0]


def test_the_zero_argument_of_sh_c_is_no_script(spawn, folders):
    """The review's case: `bash -c 'while ...' /usr/local/sbin/hardening.sh`. The shell runs its -c command; the word
    after it is only its $0, a file it never runs: it names no script (the boot scan would disable root's job that
    runs that file)."""
    folder = tempfile.mkdtemp(prefix="inferops-wrapper-")
    folders.append(folder)
    hardening = os.path.join(folder, "hardening.sh")
    with open(hardening, "w") as f:
        f.write("#!/bin/sh\necho lock-down\n")
    p = subprocess.Popen(["bash", "-c", "while true; do sleep 600; done # sglang.launch_server", hardening],
                         start_new_session=True)
    spawn.procs.append(p)
    child = _loop_child(p.pid)
    w = _family.wrapper(child, _procfs.snapshot())
    assert w and w["kind"] == "shell loop" and w["pid"] == p.pid
    assert w["script"] is None, w


def test_a_wrappers_script_is_the_file_its_shell_runs_and_its_users_own(spawn, folders):
    """nobody's loops: `bash mine.sh` (nobody's file) names mine.sh; `bash roots.sh` (root's file, which nobody can
    run) is a loop all the same, but names no script, and its note says why."""
    folder = tempfile.mkdtemp(prefix="inferops-wrapper-")
    os.chmod(folder, 0o755)
    folders.append(folder)
    paths = {}
    for name, owner in (("mine.sh", 65534), ("roots.sh", 0)):
        paths[name] = os.path.join(folder, name)
        with open(paths[name], "w") as f:
            f.write(LOOP)
        os.chmod(paths[name], 0o755)
        os.chown(paths[name], owner, owner)
    run_as = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
    found = {}
    for name in paths:
        p = subprocess.Popen(run_as + ["bash", name], cwd=folder, start_new_session=True)  # relative: the shell's cwd
        spawn.procs.append(p)
        found[name] = _family.wrapper(_loop_child(p.pid), _procfs.snapshot())
    assert found["mine.sh"]["script"] == paths["mine.sh"] and found["mine.sh"]["user"] == "nobody"
    assert "note" not in found["mine.sh"]
    theirs = found["roots.sh"]
    assert theirs["kind"] == "shell loop" and theirs["script"] is None
    assert theirs["note"] == ("its script %s is owned by root, not by nobody: no boot line is disabled for it"
                              % paths["roots.sh"])


def test_the_script_a_shell_runs():
    def script(*argv):
        proc = _procfs.Process(os.getpid(), 1, 1, 1, "S", 0, 0, "bash", list(argv), 0)
        return _family.shell_script(proc)
    assert script("bash", "-c", "while :; do x; done", "/usr/local/sbin/hardening.sh") is None
    assert script("bash", "-ec", "x", "/a") is None and script("sh", "-s", "/a") is None and script("bash") is None
    assert script("bash", "-x", "/a", "/b") == "/a" and script("bash", "-eo", "pipefail", "/a") == "/a"
    assert script("bash", "--", "/a") == "/a" and script("sh", "run.sh") == os.path.join(os.getcwd(), "run.sh")
