"""The owner, for real as root: which paths a non-root user can change (each component, links and the folders above
them), commands and functions run as nobody with nothing of root's, and opens that refuse links, FIFOs and other
owners' files."""
import json
import os
import time

import pytest

from ansible_collections.inferops.sglang.plugins.module_utils._host import owner as _owner
from ansible_collections.inferops.sglang.plugins.module_utils._host.command import CommandError

from ..conftest import NOBODY, chown_tree

pytestmark = pytest.mark.skipif(os.getuid() != 0, reason="needs root: it runs things as nobody")


@pytest.fixture
def nobody():
    return _owner.Owner(NOBODY.pw_uid, NOBODY.pw_gid)


def test_a_root_tree_is_trusted_and_so_is_a_link_to_one(tmp_path):
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "python").write_text("")
    (tmp_path / "link").symlink_to(tmp_path / "bin" / "python")
    assert _owner.distrust(str(tmp_path / "bin" / "python")) is None  # under /tmp (sticky) in root's 0700 folder
    assert _owner.trusted(str(tmp_path / "link")) and _owner.trusted("/usr/bin/python3")


def test_a_folder_the_owner_owns_anywhere_on_the_way_is_named(public_dir):
    venv = public_dir / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").symlink_to("/usr/bin/python3")
    os.chown(str(venv), NOBODY.pw_uid, NOBODY.pw_gid)
    why = _owner.distrust(str(venv / "bin" / "python"))
    assert why == "%s is owned by nobody" % venv
    os.chown(str(venv), 0, 0)
    os.chown(str(venv / "bin"), NOBODY.pw_uid, NOBODY.pw_gid)
    assert _owner.distrust(str(venv / "bin" / "python")) == "%s is owned by nobody" % (venv / "bin")


def test_a_root_link_into_the_owners_folder_follows_the_target(public_dir, tmp_path):
    theirs = public_dir / "theirs"
    theirs.mkdir()
    (theirs / "python").write_text("")
    chown_tree(theirs, NOBODY.pw_uid, NOBODY.pw_gid)
    (tmp_path / "python").symlink_to(theirs / "python")  # root's link, the owner's target
    assert _owner.distrust(str(tmp_path / "python")) == "%s is owned by nobody" % theirs


def test_a_link_the_owner_made_counts_as_the_owners_in_a_sticky_folder(public_dir):
    sticky = public_dir / "sticky"
    sticky.mkdir()
    sticky.chmod(0o1777)
    (sticky / "root-file").write_text("")
    assert _owner.trusted(str(sticky / "root-file"))  # others cannot replace root's entry in a sticky folder
    (sticky / "link").symlink_to("/usr/bin/python3")
    os.lchown(str(sticky / "link"), NOBODY.pw_uid, NOBODY.pw_gid)
    assert _owner.distrust(str(sticky / "link")) == "%s is in %s, which its group and everyone can write (owned by root)" % (
        sticky / "link", sticky)
    (sticky / "plain").mkdir()
    (sticky / "plain").chmod(0o777)
    (sticky / "plain" / "f").write_text("")
    assert "plain, which its group and everyone can write" in _owner.distrust(str(sticky / "plain" / "f"))
    assert _owner.distrust(str(sticky)) == "%s can be written by its group and everyone" % sticky
    assert _owner.distrust(str(sticky), sticky=True) is None  # root's log in /tmp: root's entries there are root's
    assert _owner.distrust(str(sticky / "plain"), sticky=True) == "%s can be written by its group and everyone" % (
        sticky / "plain")


def test_group_writable_and_other_owned_files_are_named(tmp_path):
    f = tmp_path / "f"
    f.write_text("")
    f.chmod(0o664)
    assert _owner.distrust(str(f)) == "%s can be written by its group" % f
    f.chmod(0o644)
    os.chown(str(f), NOBODY.pw_uid, 0)
    assert _owner.distrust(str(f)) == "%s is owned by nobody" % f
    assert _owner.distrust("relative/path") == "'relative/path' is not an absolute path"
    assert _owner.distrust(str(tmp_path / "missing")).startswith("cannot look at %s" % (tmp_path / "missing"))


def test_a_command_runs_as_the_owner_with_its_groups_a_clean_environment_and_no_way_back(nobody, monkeypatch):
    monkeypatch.setenv("INFEROPS_ROOT_SECRET", "s3cret")
    code = ("import json, os, sys\n"
            "try:\n    os.setuid(0); back = True\nexcept OSError:\n    back = False\n"
            "print(json.dumps({'res': os.getresuid(), 'gid': os.getresgid(), 'groups': os.getgroups(), 'env': "
            "dict(os.environ), 'stdin': sys.stdin.read(), 'back': back, 'cwd': os.getcwd()}))")
    rc, out, err = nobody.run(["/usr/bin/python3", "-I", "-c", code], 10, env={"EXTRA": "1"})
    assert rc == 0, err
    seen = json.loads(out)
    assert seen["res"] == [NOBODY.pw_uid] * 3 and seen["gid"] == [NOBODY.pw_gid] * 3 and not seen["back"]
    assert sorted(seen["groups"]) == sorted(set(os.getgrouplist("nobody", NOBODY.pw_gid)))
    assert {k: v for k, v in seen["env"].items() if k != "LC_CTYPE"} == {
        "PATH": _owner.PATH, "HOME": NOBODY.pw_dir, "LANG": "C.UTF-8", "USER": "nobody", "LOGNAME": "nobody",
        "EXTRA": "1"}
    assert seen["stdin"] == "" and seen["cwd"] == "/"


def test_never_through_a_shell_and_a_command_that_hangs_is_killed_with_its_session(nobody):
    rc, out, err = nobody.run(["echo", "$(id)", ";", "id"], 10)
    assert (rc, out) == (0, "$(id) ; id\n")
    t0 = time.monotonic()
    with pytest.raises(CommandError, match="^sh did not answer within 1 s$"):
        nobody.run(["sh", "-c", "sleep 60 & sleep 60"], 1)
    assert time.monotonic() - t0 < 10
    rc, out, err = nobody.run(["/nonexistent/python"], 5)
    assert rc == 127 and "/nonexistent/python cannot be run as nobody" in err


def test_a_function_runs_in_a_child_that_became_the_owner(nobody, tmp_path):
    assert nobody.call(os.getresuid) == [NOBODY.pw_uid] * 3
    secret = tmp_path / "secret"
    secret.write_text("root only")
    secret.chmod(0o600)
    with pytest.raises(OSError, match="Permission denied"):
        nobody.call(_owner.read_regular, str(secret))
    assert os.getuid() == 0 and os.getresuid() == (0, 0, 0)  # this process never changed


def test_an_unknown_uid_gets_no_groups_and_home_is_root():
    o = _owner.Owner(54321)
    assert (o.gid, o.groups, o.home, o.name) == (54321, [54321], "/", None)
    assert o.call(os.getgroups) == [54321]


def test_named_takes_names_and_numbers():
    assert (_owner.Owner.named("nobody").uid, _owner.Owner.named("").uid) == (NOBODY.pw_uid, 0)
    assert _owner.Owner.named("1234", "4321").gid == 4321
    with pytest.raises(KeyError):
        _owner.Owner.named("no-such-user-here")


def test_open_regular_refuses_a_link_a_fifo_a_device_and_another_owners_file(tmp_path):
    f = tmp_path / "f"
    f.write_text("data")
    assert _owner.read_regular(str(f), uid=0) == b"data" and _owner.read_regular(str(f), limit=2) == b"ta"
    (tmp_path / "link").symlink_to(f)
    with pytest.raises(OSError) as e:
        _owner.open_regular(str(tmp_path / "link"))
    assert e.value.errno == 40  # ELOOP
    os.mkfifo(str(tmp_path / "fifo"))
    t0 = time.monotonic()
    with pytest.raises(_owner.OwnerError, match="fifo is not a regular file"):
        _owner.open_regular(str(tmp_path / "fifo"))
    assert time.monotonic() - t0 < 5  # never blocked waiting for a writer
    with pytest.raises(_owner.OwnerError, match="not a regular file"):
        _owner.open_regular("/dev/null")
    with pytest.raises(_owner.OwnerError, match="is owned by root, not nobody"):
        _owner.open_regular(str(f), uid=NOBODY.pw_uid)


def test_a_dangling_link_creates_nothing(tmp_path):
    target = tmp_path / "cron.d" / "x"
    target.parent.mkdir()
    (tmp_path / "nohup.out").symlink_to(target)
    with pytest.raises(OSError):
        _owner.open_regular(str(tmp_path / "nohup.out"), os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    assert not target.exists()
    fd = _owner.open_regular(str(tmp_path / "new"), os.O_WRONLY | os.O_CREAT)
    os.close(fd)
    assert (tmp_path / "new").stat().st_mode & 0o777 == 0o600


def test_a_non_root_caller_cannot_run_as_another(nobody):
    rc, out, err = nobody.call(lambda: _owner.Owner(0).run(["id", "-u"], 5))
    assert rc == 127 and "only root may run a command as root" in err, err
    with pytest.raises(OSError, match="only root may run a command as root"):
        nobody.call(lambda: _owner.Owner(0).call(os.getuid))
