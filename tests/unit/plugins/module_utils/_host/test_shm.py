"""The shared-memory sweep on real files and real processes: a segment held open or mapped by a live process stays,
another user's stays, a dead creator's goes, a name the version does not create stays; the unit's ExecStartPre
script, run as a user with python -I, does the same, and is the same text as the module's."""
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile

import pytest

from ansible_collections.inferops.sglang.plugins.module_utils._host import shm as _shm

ROOT = pathlib.Path(__file__).resolve().parents[5]
SCRIPT = ROOT / "roles" / "systemd_unit" / "files" / "inferops-sglang-sweep-shm"
# the unit's user: a uid of its own (no passwd entry), as a service's user is: a shared one (nobody) has processes
# elsewhere on a test host (other containers') that cannot be looked at, and then every segment rightly stays
NOBODY = 61000 + os.getpid() % 1000
# what the user runs: a system interpreter (the test's own may live in root's home)
PY = next((p for p in ("/usr/bin/python3", "/usr/local/bin/python3") if os.access(p, os.X_OK)), None)


def dead_pid():
    """A pid that existed and is gone (reaped)."""
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def segment(folder, name, size=4096, uid=NOBODY):
    """A segment as SGLang makes one (mode 0600), of the unit's user (here nobody) unless said."""
    path = os.path.join(str(folder), name)
    with open(path, "wb") as f:
        f.write(b"\0" * size)
    os.chmod(path, 0o600)
    os.chown(path, uid, uid)
    return path


HOLD = r"""
import mmap, os, sys, time
fd = os.open(sys.argv[1], os.O_RDWR)
if sys.argv[2] == "map":
    m = mmap.mmap(fd, 0)
    os.close(fd)   # mapped only, no fd left
print("ready", flush=True)
time.sleep(60)
"""


pytestmark = pytest.mark.skipif(os.getuid() != 0 or not shutil.which("setpriv") or not PY,
                                reason="needs root and setpriv: the segments and their holders are another user's")


@pytest.fixture
def holder():
    procs = []

    def hold(path, how, user=NOBODY):
        pre = ["setpriv", "--reuid=%d" % user, "--regid=%d" % user, "--clear-groups"]
        p = subprocess.Popen(pre + [PY, "-c", HOLD, path, how], stdout=subprocess.PIPE)
        procs.append(p)
        assert p.stdout.readline().strip() == b"ready"
        return p

    yield hold
    for p in procs:
        p.kill()
        p.wait()


@pytest.fixture
def shmdir():
    """A folder like /dev/shm (mode 1777: every user creates its own), reachable by the user (pytest's own is 0700)."""
    d = pathlib.Path(tempfile.mkdtemp(prefix="inferops-shm-"))
    d.chmod(0o1777)
    yield d
    shutil.rmtree(str(d))


def test_names_per_version_as_the_wheels_create_them():
    pid = 4242
    names = {"multi_tokenizer_args_%d" % pid: (True, pid), "sgl_shm_mq_%d_0a1b2c3d" % pid: (True, pid),
             "sgl_shm_nodecheck_%d_deadbeef" % pid: (True, pid), "sglang_loads_0123456789ab_89abcdef.shm": (True, None),
             "psm_1a2b3c4d": (False, None), "nccl-abc": (False, None), "sgl_shm_mq_x_0a1b2c3d": (False, None),
             "multi_tokenizer_args_12x": (False, None)}
    for name, want in names.items():
        assert _shm.match(name, _shm.patterns("0.5.23+double")) == want, name
    # 0.5.5 and 0.5.9 create only multi_tokenizer_args_<pid>
    assert _shm.match("sgl_shm_mq_4242_0a1b2c3d", _shm.patterns("0.5.9")) == (False, None)
    assert _shm.match("multi_tokenizer_args_4242", _shm.patterns("0.5.9")) == (True, 4242)
    assert _shm.patterns("not a version") == []


def test_a_dead_creators_segments_go_a_live_ones_stay(shmdir, holder):
    gone = dead_pid()
    left = [segment(shmdir, n) for n in ("multi_tokenizer_args_%d" % gone, "sgl_shm_mq_%d_0a1b2c3d" % gone,
                                         "sglang_loads_0123456789ab_89abcdef.shm")]
    mine = os.getpid()
    live_creator = segment(shmdir, "sgl_shm_mm_%d_11111111" % mine)  # its creator runs, nothing maps it
    held = segment(shmdir, "sgl_shm_mq_%d_22222222" % dead_pid())    # creator gone, held open
    mapped = segment(shmdir, "sglang_loads_aaaaaaaaaaaa_bbbbbbbb.shm")  # no pid, mapped only
    holder(held, "open")
    holder(mapped, "map")
    other_name = segment(shmdir, "psm_%08x" % gone)                 # Python's own, not SGLang's name
    other_user = segment(shmdir, "multi_tokenizer_args_%d" % dead_pid(), uid=0)
    r = _shm.sweep("0.5.15", NOBODY, str(shmdir))
    assert sorted(r["removed"]) == sorted(os.path.basename(p) for p in left), r
    assert r["bytes"] == 3 * 4096 and r["errors"] == []
    for p in left:
        assert not os.path.exists(p)
    for p in (live_creator, held, mapped, other_name, other_user):
        assert os.path.exists(p), p
    segs = dict((s["name"], s["why"]) for s in _shm.look("0.5.15", NOBODY, str(shmdir)))
    assert segs == {os.path.basename(live_creator): "its creator (pid %d) runs" % mine,
                    os.path.basename(held): "mapped or open", os.path.basename(mapped): "mapped or open"}


def test_a_version_that_does_not_create_a_name_leaves_it(shmdir):
    gone = dead_pid()
    p = segment(shmdir, "sgl_shm_mq_%d_0a1b2c3d" % gone)
    q = segment(shmdir, "multi_tokenizer_args_%d" % gone)
    r = _shm.sweep("0.5.9", NOBODY, str(shmdir))
    assert r["removed"] == [os.path.basename(q)] and os.path.exists(p)


def test_a_reused_pid_is_the_creator_only_while_it_could_be(shmdir, holder):
    """A live process with the creator's pid that started after the segment was last changed is not its creator: the
    segment goes, unless something maps or holds it."""
    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        path = segment(shmdir, "sgl_shm_sync_%d_33333333" % p.pid)
        st = os.stat(path)
        assert not _shm.creator_gone(p.pid, st), "the segment is younger than the process: maybe its creator"
        old = os.stat_result(st[:9] + (st.st_ctime - 3600,))  # a segment an hour older than the process
        assert _shm.creator_gone(p.pid, old)
        assert not _shm.creator_gone(os.getpid(), os.stat(path)), "this process made it"
    finally:
        p.kill()
        p.wait()
    assert _shm.creator_gone(p.pid, os.stat(path)), "reaped: gone"


def test_the_unit_script_is_the_modules_sweep():
    """The ExecStartPre script is standalone, and its sweep is shm.py's, the same text."""

    def mark(text):
        return text[text.index("# --- begin: the sweep"):text.index("# --- end: the sweep ---")]

    module = pathlib.Path(_shm.__file__).read_text()
    assert mark(SCRIPT.read_text()) == mark(module)
    assert "ansible" not in SCRIPT.read_text().replace("ansible_managed", "")


def test_the_unit_script_as_the_units_user(shmdir, holder):
    """Run as a user (setpriv) with python -I: that user's leftovers go; root's, and the user's held ones, stay."""
    gone = dead_pid()
    theirs = segment(shmdir, "sgl_shm_mq_%d_0a1b2c3d" % gone)
    held = segment(shmdir, "sglang_loads_0123456789ab_89abcdef.shm")
    holder(held, "map")
    roots = segment(shmdir, "multi_tokenizer_args_%d" % gone, uid=0)
    out = subprocess.run(["setpriv", "--reuid=%d" % NOBODY, "--regid=%d" % NOBODY, "--clear-groups",
                          PY, "-I", str(SCRIPT), "--dir", str(shmdir), "--version", "0.5.15"],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=60, check=True).stdout.decode()
    assert "removed 1 segment(s) left behind (4096 bytes), kept 1 in use" in out, out
    assert not os.path.exists(theirs) and os.path.exists(held) and os.path.exists(roots)


def test_the_unit_script_never_fails_the_start(tmp_path):
    for args in (["--dir", str(tmp_path / "missing"), "--version", "0.5.15"], ["--bogus"], []):
        r = subprocess.run([sys.executable, "-I", str(SCRIPT)] + args, stdout=subprocess.PIPE, timeout=60, check=False)
        assert r.returncode == 0 and r.stdout.startswith(b"inferops-sglang-sweep-shm: "), (args, r.stdout)


def test_the_switch_sweeps_what_the_old_family_left(shmdir):
    gone = dead_pid()
    p = segment(shmdir, "sgl_shm_mq_%d_0a1b2c3d" % gone)
    q = segment(shmdir, "multi_tokenizer_args_%d" % gone, uid=0)
    me = str(NOBODY)
    r = _shm.after_stop([{"pid": 1, "user": me}, {"pid": 2, "user": me}], str(shmdir))
    assert r["removed"] == 1 and r["bytes"] == 4096 and r["errors"] == []
    assert not os.path.exists(p) and os.path.exists(q), "only the family's user's"


def test_usage_for_status(shmdir, holder):
    gone = dead_pid()
    segment(shmdir, "sgl_shm_mq_%d_0a1b2c3d" % gone, size=8192)
    holder(segment(shmdir, "sglang_loads_0123456789ab_89abcdef.shm"), "open")
    u = _shm.usage("0.5.23", str(NOBODY), str(shmdir))
    assert (u["segments"], u["bytes"], u["left_behind"], u["left_behind_bytes"]) == (2, 8192 + 4096, 1, 8192)
    assert u["free_bytes"] > 0 and "2 segment(s)" in u["summary"]


def test_a_process_that_cannot_be_looked_at_keeps_segments_only_when_it_could_be_sglangs(tmp_path):
    """sshd's session processes are not dumpable (root's, on every host where the cutover runs over SSH): their maps
    cannot be read, yet they never hold an SGLang segment; a Python or an sglang:: process that cannot be read might."""
    proc = tmp_path / "proc"
    for pid, cmdline in ((101, b"sshd: root@notty\0"), (102, b"/usr/sbin/sshd\0-D\0")):
        (proc / str(pid)).mkdir(parents=True)
        (proc / str(pid) / "cmdline").write_bytes(cmdline)  # no maps, no fd: they cannot be looked at
    device = os.stat(str(tmp_path)).st_dev
    assert _shm.holders(device, str(proc)) == (set(), set())
    for pid, cmdline in ((103, b"/opt/sglang/venv/bin/python3\0-m\0sglang.launch_server\0"), (104, b"sglang::scheduler\0"),
                         (105, b"")):
        (proc / str(pid)).mkdir()
        (proc / str(pid) / "cmdline").write_bytes(cmdline)
        held, unseen = _shm.holders(device, str(proc))
        assert unseen == {os.getuid()}, (pid, unseen)
        (proc / str(pid) / "cmdline").unlink()
        (proc / str(pid)).rmdir()
