"""Files written whole, only when they differ, atomically."""
import os
import stat

import pytest

from ansible_collections.inferops.sglang.plugins.module_utils._host.files import File, sha1, write_json

from ..conftest import NOBODY


def mode(path):
    return stat.S_IMODE(os.stat(path).st_mode)


def test_a_missing_file_differs_and_is_written_with_its_mode_in_a_new_folder(tmp_path):
    path = tmp_path / "env" / "x.env"
    f = File(str(path), "A=1\n", 0o600, dir_mode=0o700)
    assert f.differs and f.content_differs and not f.exists
    f.write()
    assert path.read_text() == "A=1\n" and mode(path) == 0o600 and mode(path.parent) == 0o700
    assert not File(str(path), "A=1\n", 0o600).differs
    assert os.listdir(path.parent) == ["x.env"]  # no temporary file left


def test_a_mode_alone_differs_but_not_the_content(tmp_path):
    path = tmp_path / "u.service"
    path.write_text("[Unit]\n")
    os.chmod(path, 0o666)
    f = File(str(path), "[Unit]\n", 0o644)
    assert f.differs and not f.content_differs
    f.write()
    assert mode(path) == 0o644


def test_the_owner_differs(tmp_path):
    path = tmp_path / "u.service"
    path.write_text("x")
    os.chmod(path, 0o644)
    st = os.stat(path)
    assert not File(str(path), "x", 0o644, st.st_uid, st.st_gid).differs
    assert File(str(path), "x", 0o644, st.st_uid + 1, st.st_gid).differs


def test_the_diff_shows_before_and_after_or_what_the_caller_masks(tmp_path):
    path = tmp_path / "x.env"
    path.write_text("KEY=old\n")
    f = File(str(path), "KEY=new\n", 0o600)
    assert f.diff() == dict(before_header=str(path), after_header=str(path), before="KEY=old\n", after="KEY=new\n")
    masked = f.diff(lambda text: text.split("=")[0] + "=***")
    assert masked["before"] == "KEY=***" and masked["after"] == "KEY=***"
    assert File(str(tmp_path / "new"), "x", 0o600).diff()["before"] == ""


def test_sha1_is_of_the_utf8_text():
    assert sha1("") == "da39a3ee5e6b4b0d3255bfef95601890afd80709"


@pytest.mark.skipif(os.getuid() != 0, reason="needs root: the folder is nobody's")
def test_an_existing_folder_another_user_owns_is_neither_chmodded_nor_written_into(public_dir):
    folder = public_dir / "state"
    folder.mkdir(mode=0o755)
    os.chown(str(folder), NOBODY.pw_uid, NOBODY.pw_gid)
    with pytest.raises(OSError, match="%s is owned by nobody, not by root: nothing is written there" % folder):
        File(str(folder / "capture.json"), "{}", 0o600, dir_mode=0o700).write()
    assert mode(folder) == 0o755 and os.listdir(str(folder)) == []


def test_the_temporary_file_is_new_never_a_link_planted_at_a_name_known_beforehand(tmp_path):
    """A link at the name the temporary file used to have (NAME.PID.tmp, .NAME.PID.tmp) is never written through."""
    target = tmp_path / "elsewhere"
    target.write_text("untouched")
    for name in ("out.json.%d.tmp" % os.getpid(), ".out.json.%d.tmp" % os.getpid()):
        (tmp_path / name).symlink_to(target)
    write_json(str(tmp_path / "out.json"), {"a": 1})
    File(str(tmp_path / "out.json"), "{}", 0o600).write()
    assert target.read_text() == "untouched" and (tmp_path / "out.json").read_text() == "{}"
    assert sorted(os.listdir(str(tmp_path))) == sorted(["elsewhere", "out.json", "out.json.%d.tmp" % os.getpid(),
                                                        ".out.json.%d.tmp" % os.getpid()])
