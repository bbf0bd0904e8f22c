"""Selection against real processes: trees, escapes, subreapers, zombies, ancestors, protected decoys."""
import json
import os
import shlex
import shutil
import subprocess
import sys

import pytest

from ansible_collections.inferops.sglang.plugins.module_utils._host import procfs as _procfs
from ansible_collections.inferops.sglang.plugins.module_utils._host.selection import Selector, SelectionError

from tests.unit.conftest import COLLECTIONS, wait_for

from .. import programs


def pids_of(sel):
    return sorted(p.pid for p in sel.targets)


@pytest.mark.parametrize("kw, message", [
    (dict(pattern="("), "not a valid regular expression"),
    (dict(pattern=".*"), "matches every process"),
    (dict(pattern=""), "matches every process"),
    (dict(pattern="x*"), "matches every process"),
    (dict(pid=["abc"]), "is not an integer"),
    (dict(pid=[0]), "is not positive"),
    (dict(pid=[-4]), "is not positive"),
    (dict(pid=[1]), "pid 1 is the init process"),
    (dict(pid=[os.getpid()]), "own process"),
    (dict(), "nothing to select"),
    (dict(pattern="x", exclude=["["]), "not a valid regular expression"),
    (dict(pattern="x", max_targets=0), "max_targets"),
    (dict(pattern="x", unprotect=["bash"]), "not protected"),
])
def test_bad_input_is_refused_before_anything(kw, message):
    with pytest.raises(SelectionError, match=message):
        Selector(**kw)


def test_pattern_with_tree_takes_descendants(run, spawn):
    p, info = run(programs.TREE_WITH_STUBBORN_CHILD)
    sel = Selector(pattern=spawn.marker + " .*ready").select(tree=True)
    assert pids_of(sel) == sorted(info["pids"].values())
    assert sel.reason[info["pids"]["parent"]] == "match"
    # without the tree only the parent (the child's argv has the marker too, but not "ready")
    sel = Selector(pattern=spawn.marker + " .*ready").select(tree=False)
    assert pids_of(sel) == [info["pids"]["parent"]]
    assert [r.pid for r in sel.roots()] == [info["pids"]["parent"]]


def test_escaped_grandchild_is_found_by_pattern(run, spawn):
    p, info = run(programs.ESCAPING_GRANDCHILD)
    gc = _procfs.read(info["pids"]["grandchild"])
    assert gc.ppid != info["pids"]["parent"] and gc.sid == gc.pid  # reparented, own session
    sel = Selector(pattern=spawn.marker).select(tree=True)
    assert set(info["pids"].values()) <= set(pids_of(sel))


def test_subreaper_adopts_orphan_which_is_then_a_descendant(run, spawn):
    p, info = run(programs.SUBREAPER)
    orphan = _procfs.read(info["pids"]["orphan"])
    assert orphan.ppid == info["pids"]["subreaper"]
    sel = Selector(pid=[info["pids"]["subreaper"]]).select(tree=True)
    assert pids_of(sel) == sorted(info["pids"].values())
    assert sel.reason[orphan.pid] == "descendant"


def test_zombie_is_reported_not_targeted(run, spawn):
    p, info = run(programs.ZOMBIE_PARENT)
    z = _procfs.read(info["pids"]["zombie"])
    assert z.is_zombie
    sel = Selector(pid=[info["pids"]["zombie"], info["pids"]["parent"]]).select()
    assert pids_of(sel) == [info["pids"]["parent"]]
    assert [x.pid for x in sel.zombies] == [info["pids"]["zombie"]]


def test_own_ancestor_whose_argv_holds_the_pattern_is_never_selected(run, spawn, tmp_path):
    # A runner whose argv contains the pattern starts the selection as its child: the runner is refused.
    code = ("import json, sys; sys.path.insert(0, %r); from ansible_collections.inferops.sglang.plugins.module_utils"
            "._host.selection import Selector; s = Selector(pattern=%r).select(); "
            "print(json.dumps([[p.pid for p in s.targets], [(p.pid, w) for p, w in s.refused]]))") % (COLLECTIONS, spawn.marker)
    p, info = run(programs.RUNNER, sys.executable, "-c", code)
    targets, refused = json.loads(info["out"])
    runner = info["pids"]["runner"]
    assert runner not in targets
    assert (runner, "ancestor") in [tuple(r) for r in refused]
    assert any(why == "self" for dummy, why in refused), "the selecting process itself matched (its argv has the pattern)"


def test_protected_decoy_is_refused_by_its_real_name(decoy, spawn):
    sel = Selector(pattern="nvidia-persistenced 600").select()
    assert decoy.pid not in pids_of(sel)
    assert [(p.pid, w) for p, w in sel.refused] == [(decoy.pid, "protected (nvidia-persistenced)")]
    assert _procfs.read(decoy.pid).comm == "nvidia-persiste"  # comm is cut: names come from exe and argv[0]
    sel = Selector(pattern="nvidia-persistenced 600", unprotect=["nvidia-persistenced"]).select()
    assert pids_of(sel) == [decoy.pid]


def test_extra_protected_names(run, spawn):
    p, info = run(programs.HOLDER)
    sel = Selector(pid=[p.pid], protect=[os.path.basename(os.path.realpath(sys.executable))]).select()
    assert sel.targets == [] and sel.refused[0][1].startswith("protected")


def test_max_targets_refuses_naming_the_matches(run, spawn):
    p, info = run(programs.TREE_WITH_STUBBORN_CHILD)
    with pytest.raises(SelectionError, match=r"2 processes would be hit, more than max_targets=1.* They are: %d .*p0.py"
                       % info["pids"]["parent"]):
        Selector(pattern=spawn.marker, max_targets=1).select()


def test_user_and_exclude_filters(run, spawn):
    p, info = run(programs.TREE_WITH_STUBBORN_CHILD)
    assert pids_of(Selector(pattern=spawn.marker, exclude=["child"]).select()) == [info["pids"]["parent"]]
    assert pids_of(Selector(pattern=spawn.marker, user="root").select()) == sorted(info["pids"].values())
    assert pids_of(Selector(pattern=spawn.marker, user="nobody").select()) == []


def test_missing_pid_is_reported():
    free = max(_procfs.pids()) + 100000
    sel = Selector(pid=[free]).select()
    assert sel.targets == [] and sel.missing == [free]


def test_kernel_threads_never_match():
    if not any(p.is_kernel_thread for p in _procfs.snapshot().values()):
        pytest.skip("no kernel threads visible in this pid namespace")
    sel = Selector(pattern="kworker|kthreadd").select()
    assert all(not p.is_kernel_thread for p in sel.targets)


def named(tmp_path, name, spawn, *fds):
    """A real process whose executable (a copy of sleep) has this name, holding fds open across exec."""
    exe = tmp_path / "named" / name
    exe.parent.mkdir(exist_ok=True)
    shutil.copy("/bin/sleep", str(exe))
    redirs = " ".join("%d<%s" % (3 + i, f) for i, f in enumerate(fds))
    p = subprocess.Popen(["bash", "-c", "exec %s %s 600" % (redirs, shlex.quote(str(exe)))], stdin=subprocess.DEVNULL)
    spawn.procs.append(p)
    wait_for(lambda: os.path.basename(os.readlink("/proc/%d/exe" % p.pid)) == name)
    return p


@pytest.mark.parametrize("name, pattern", [
    ("systemd-journald", "systemd-*"), ("systemd-logind", "systemd-*"), ("containerd", "containerd"),
    ("containerd-shim-runc-v2", "containerd-*"), ("dockerd", "dockerd"), ("kubelet", "kubelet"),
    ("sshd-session", "sshd-*"), ("dbus-daemon", "dbus-daemon"), ("nv-hostengine", "nv-hostengine"), ("init", "init"),
])
def test_protected_by_pattern(tmp_path, spawn, name, pattern):
    """Not only exact names: systemd-journald, a containerd shim, OpenSSH's sshd-session are never touched."""
    p = named(tmp_path, name, spawn)
    sel = Selector(pid=[p.pid]).select()
    assert sel.targets == [] and [(q.pid, w) for q, w in sel.refused] == [(p.pid, "protected (%s)" % name)]
    sel = Selector(pid=[p.pid], unprotect=[pattern]).select()
    assert pids_of(sel) == [p.pid], "taken off the list by the pattern it is listed as"


def test_a_pattern_of_ones_own_protects(run, spawn):
    p, info = run(programs.HOLDER)
    sel = Selector(pid=[p.pid], protect=["python3*"]).select()
    assert sel.targets == [] and sel.refused[0][1].startswith("protected (python3")
