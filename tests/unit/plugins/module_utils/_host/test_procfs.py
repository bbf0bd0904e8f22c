"""Reading /proc, on real processes: identity, odd names and titles, zombies, trees, open files, environment."""
import os
import pwd
import signal
import sys

import pytest

from ansible_collections.inferops.sglang.plugins.module_utils._host import procfs as _procfs
from ansible_collections.inferops.sglang.plugins.module_utils._host.redact import Redactor

from ..conftest import wait_for
from .. import programs

# Renames itself (comm) to a name with the characters that break a naive parse of /proc/PID/stat.
ODD_COMM = r'''
import ctypes, json, os, sys, time
marker, ready = sys.argv[1], sys.argv[2]
ctypes.CDLL(None).prctl(15, b"x) (y z", 0, 0, 0)   # PR_SET_NAME
json.dump({"pids": {"odd": os.getpid()}}, open(ready, "w"))
time.sleep(600)
'''

# Retitles itself as SGLang's processes do (setproctitle pads the title with NULs).
RETITLED = r'''
import json, os, sys, time, setproctitle
marker, ready = sys.argv[1], sys.argv[2]
setproctitle.setproctitle("sglang::scheduler_TP0")
json.dump({"pids": {"titled": os.getpid()}}, open(ready, "w"))
time.sleep(600)
'''


def started(p):
    """The Process of a child once its exec is through (Popen returns before the new command line is set up)."""
    def execd():
        proc = _procfs.read(p.pid)
        return proc if proc is not None and proc.argv else None
    return wait_for(execd)


def gone_pid():
    """A pid no process can have: above the kernel's pid_max."""
    with open("/proc/sys/kernel/pid_max") as f:
        return int(f.read()) + 1


def test_a_process_read_whole(spawn):
    p = spawn.python("import time; time.sleep(600)", "--api-key", "sk-secret")
    proc = started(p)
    assert proc.pid == p.pid and proc.ppid == os.getpid()
    assert proc.pgid == os.getpgid(p.pid) and proc.sid == os.getsid(p.pid)
    assert proc.argv[0] == sys.executable and proc.argv[2:] == [spawn.marker, "--api-key", "sk-secret"]
    assert proc.cmdline == " ".join(proc.argv) and proc.state in ("S", "R")
    assert proc.uid == os.getuid() and proc.user == pwd.getpwuid(os.getuid()).pw_name
    assert proc.identity == (p.pid, _procfs.starttime(p.pid)) and proc.starttime > 0
    assert not proc.is_kernel_thread and not proc.is_zombie and _procfs.is_alive(proc.identity)
    assert proc.comm == os.path.basename(sys.executable)[:15], "the name it was executed by"
    assert proc.exe_name() == os.path.basename(os.path.realpath(sys.executable))
    assert proc.names() == {os.path.basename(os.path.realpath(sys.executable)), os.path.basename(sys.executable)}
    row = proc.as_dict(Redactor())
    assert row["cmdline"].endswith("--api-key ********") and "sk-secret" not in row["cmdline"]
    assert dict(row, cmdline=None) == dict(pid=p.pid, ppid=os.getpid(), pgid=proc.pgid, user=proc.user,
                                           state=proc.state, comm=proc.comm, cmdline=None)
    assert proc.as_dict()["cmdline"] == proc.cmdline


def test_a_name_with_spaces_and_parentheses_is_read_whole(run):
    p, info = run(ODD_COMM)
    proc = _procfs.read(info["pids"]["odd"])
    assert proc.comm == "x) (y z"
    assert proc.ppid == os.getpid() and proc.state in ("S", "R") and _procfs.state(p.pid) == proc.state
    assert _procfs.starttime(p.pid) == proc.starttime


def test_a_retitled_process_is_its_title_without_the_padding(run):
    p, info = run(RETITLED)
    proc = _procfs.read(info["pids"]["titled"])
    assert proc.argv == ["sglang::scheduler_TP0"] and proc.cmdline == "sglang::scheduler_TP0"
    assert os.path.basename(os.path.realpath(sys.executable)) in proc.names() and "sglang::scheduler_TP0" in proc.names()
    assert _procfs.read(p.pid, raw_cmdline=b"sglang::detokenizer\0\0\0\0").argv == ["sglang::detokenizer"]
    assert _procfs.read(p.pid, raw_cmdline=b"").argv == []


def test_names_are_the_executable_and_argv0_without_a_title_colon():
    me = _procfs.read(os.getpid())
    exe = os.path.basename(os.path.realpath(sys.executable))
    for argv0, name in (("/opt/venv/bin/python3 -u", "python3"), ("sglang::scheduler:", "sglang::scheduler"), ("", None)):
        proc = _procfs.Process(os.getpid(), 1, 1, 1, "S", me.starttime, 0, "python3", [argv0], 0)
        assert proc.names() == ({exe, name} if name else {exe})


def test_a_zombie_is_dead_and_has_no_executable(run):
    p, info = run(programs.ZOMBIE_PARENT)
    z = info["pids"]["zombie"]
    proc = _procfs.read(z)
    assert proc.is_zombie and proc.state == "Z" and _procfs.state(z) == "Z" and proc.ppid == p.pid
    assert proc.exe_name() == "" and proc.argv == []
    assert not _procfs.is_alive(proc.identity) and _procfs.process_alive(z, proc.starttime)() == "pid %d exited" % z


def test_alive_is_this_start_time_only(spawn):
    p = spawn.python("import time; time.sleep(600)")
    start = started(p).starttime
    check = _procfs.process_alive(p.pid, start)
    assert _procfs.is_alive((p.pid, start)) and check() is None
    assert not _procfs.is_alive((p.pid, start + 1)), "another process at the same pid"
    assert _procfs.process_alive(p.pid, None)() == "pid %d exited" % p.pid
    p.kill()
    p.wait()
    assert not _procfs.is_alive((p.pid, start)) and check() == "pid %d exited" % p.pid


def test_a_gone_pid_reads_as_nothing():
    pid = gone_pid()
    assert _procfs.read(pid) is None and _procfs.starttime(pid) is None and _procfs.state(pid) is None
    assert not _procfs.is_alive((pid, 1)) and _procfs.process_alive(pid, 1)() == "pid %d exited" % pid
    assert _procfs.open_files(pid) == {} and _procfs.environ(pid) == {} and _procfs.unit_of(pid) is None
    assert _procfs.ancestors(pid) == [pid]


def test_kernel_threads_are_known_by_their_flag_or_kthreadd():
    def proc(pid, ppid, flags):
        return _procfs.Process(pid, ppid, 0, 0, "S", 1, flags, "k", [], 0)

    assert proc(90, 2, 0).is_kernel_thread and proc(2, 0, 0).is_kernel_thread
    assert proc(90, 1, _procfs.PF_KTHREAD).is_kernel_thread and not proc(90, 1, 0x40).is_kernel_thread


def test_snapshot_reads_whole_only_what_is_wanted(spawn):
    a = spawn.python("import time; time.sleep(600)", "first")
    b = spawn.python("import time; time.sleep(600)", "second")
    started(a)
    started(b)
    asked = []

    def wanted(pid, cmdline):
        asked.append(pid)
        return spawn.marker + " first" in cmdline

    got = _procfs.snapshot(wanted)
    assert list(got) == [a.pid] and got[a.pid].cmdline.endswith(spawn.marker + " first")
    assert {a.pid, b.pid, os.getpid()} <= set(asked)
    everything = _procfs.snapshot()
    assert {a.pid, b.pid, os.getpid()} <= set(everything) and everything[b.pid].ppid == os.getpid()
    assert {a.pid, b.pid, os.getpid()} <= set(_procfs.pids())


def test_ancestors_and_descendants_of_a_tree(run):
    info = run(programs.TREE_WITH_STUBBORN_CHILD)[1]
    parent, child = info["pids"]["parent"], info["pids"]["child"]
    procs = _procfs.snapshot()
    chain = _procfs.ancestors(child)
    assert chain[:3] == [child, parent, os.getpid()] and chain == _procfs.ancestors(child, procs)
    assert _procfs.read(chain[-1]).ppid == 0, "up to the top of the pid namespace"
    assert _procfs.ancestors()[0] == os.getpid() and _procfs.ancestors()[1] == os.getppid()
    assert _procfs.descendants(procs, [parent]) == [child]
    assert {parent, child} <= set(_procfs.descendants(procs, [os.getpid()]))
    assert parent not in _procfs.descendants(procs, [parent, child]), "the roots are not their own descendants"
    assert _procfs.children_map(procs)[parent] == [child]


def test_an_escaped_grandchild_is_no_descendant(run):
    info = run(programs.ESCAPING_GRANDCHILD)[1]
    gc = info["pids"]["grandchild"]
    procs = _procfs.snapshot()
    assert gc not in _procfs.descendants(procs, [info["pids"]["parent"]])
    assert procs[gc].sid == gc and procs[gc].ppid != info["pids"]["parent"]
    os.kill(gc, signal.SIGKILL)
    wait_for(lambda: not _procfs.is_alive(procs[gc].identity))


def test_open_files_and_the_environment(run, tmp_path):
    held = [tmp_path / "a.bin", tmp_path / "dir with space.bin"]
    for f in held:
        f.write_bytes(b"x")
    p, info = run(programs.HOLDER, *map(str, held), env=dict(os.environ, INFEROPS_MARK="a=b c", EMPTY=""))
    files = _procfs.open_files(info["pids"]["holder"])
    assert all(isinstance(fd, int) for fd in files) and {str(f) for f in held} <= set(files.values())
    env = _procfs.environ(p.pid)
    assert env["INFEROPS_MARK"] == "a=b c" and env["EMPTY"] == "" and env["PATH"] == os.environ["PATH"]


def test_the_service_of_a_process_from_its_cgroup_and_a_stat_cut_short(tmp_path, monkeypatch):
    cgroups = {
        1: "0::/init.scope\n",
        2: "0::/system.slice/sglang-30000.service\n",
        3: "12:pids:/x\n1:name=systemd:/system.slice/a.service/b.service/inner\n0::/\n",
        4: "0::/user.slice/user-0.slice/session-4.scope\n",
        5: "0::/system.slice/sglang-30000.service/x.scope\n",
        6: "4:memory:/y.service\n0::/\n",
    }
    for pid, text in cgroups.items():
        (tmp_path / str(pid)).mkdir()
        (tmp_path / str(pid) / "cgroup").write_text(text)
    monkeypatch.setattr(_procfs, "PROC", str(tmp_path))
    assert [_procfs.unit_of(pid) for pid in sorted(cgroups)] == [None, "sglang-30000.service", "a.service", None,
                                                                 "sglang-30000.service", None]
    assert _procfs.unit_of(7) is None  # gone
    (tmp_path / "8").mkdir()
    (tmp_path / "8" / "stat").write_bytes(b"8 (short) S 1")
    (tmp_path / "8" / "cmdline").write_bytes(b"short\0")
    assert _procfs.starttime(8) is None and _procfs.state(8) == "S"
    assert sorted(_procfs.pids()) == [1, 2, 3, 4, 5, 6, 8]


@pytest.mark.parametrize("path, unit", [
    ("/system.slice/sglang-30000.service", "sglang-30000.service"),
    ("/inferops.slice/sglang-30000.service", "sglang-30000.service"),  # Slice= of the unit's own
    # a user's own manager: every cgroup below it is user@1000.service's, whatever its last component is named
    ("/user.slice/user-1000.slice/user@1000.service/app.slice/sglang-30000.service", "user@1000.service"),
    ("/user.slice/user-1000.slice/user@1000.service/sglang-30000.service", "user@1000.service"),
    ("/user.slice/user-1000.slice/session-3.scope", None),
    ("/", None),
])
def test_the_unit_is_the_first_component_that_is_not_a_slice(path, unit):
    """The system manager attributes a cgroup to the first non-slice component below its root (systemd's
    cg_path_get_unit): a user with a manager of their own can name a cgroup sglang-30000.service, never be in it."""
    assert _procfs.systemd_unit(path, ".service") == unit


def test_below_a_containers_root_only(tmp_path):
    """In a container without a cgroup namespace every path starts with the container's own cgroup: PID 1's, less
    /init.scope. A path outside it is no unit of this manager."""
    hybrid = "9:name=systemd:/libpod-c1/user.slice/user-1.slice/user@1.service/s.service\n" \
             "0::/libpod-c1/system.slice/s.service\n"
    for pid, text in {1: "0::/libpod-c1/init.scope\n", 2: "0::/libpod-c1/system.slice/s.service\n",
                      3: "0::/system.slice/s.service\n", 4: hybrid}.items():
        (tmp_path / str(pid)).mkdir()
        (tmp_path / str(pid) / "cgroup").write_text(text)
    proc = str(tmp_path)
    assert [_procfs.unit_of(pid, proc=proc) for pid in (2, 3, 4)] == ["s.service", None, "user@1.service"], \
        "the name=systemd line is systemd's on a hybrid host"
    assert _procfs.cgroup(2, proc) == "/libpod-c1/system.slice/s.service" and _procfs.cgroup(9, proc) is None


def test_a_uid_without_a_name_is_its_number():
    uids = set(p.pw_uid for p in pwd.getpwall())
    free = next(u for u in range(4242, 10 ** 6) if u not in uids)
    assert _procfs.user_name(free) == str(free) and _procfs.user_name(os.getuid()) == pwd.getpwuid(os.getuid()).pw_name


def test_parse_stat_takes_the_last_parenthesis():
    comm, fields = _procfs.parse_stat(b"42 (a) b (c)) S 1 42 42 0")
    assert comm == "a) b (c)" and fields == ["S", "1", "42", "42", "0"]
