"""The progress file: root's, 0600, appended to by a child that dropped its privileges through the descriptor opened
before, read line by line from outside, removed at the end; never made where another user could change it."""
import json
import os
import stat

import pytest

from ansible_collections.inferops.sglang.plugins.module_utils._host import owner as _owner, progress as _progress
from ansible_collections.inferops.sglang.plugins.module_utils._host.redact import MASK, Redactor
from ..conftest import NOBODY


def test_lines_are_appended_read_as_the_last_whole_one_and_the_file_removed(tmp_path):
    folder = tmp_path / "state" / "30000"
    path = folder / "prewarm.jsonl"
    p = _progress.ProgressFile(str(path))
    assert stat.S_IMODE(os.stat(str(folder)).st_mode) == 0o700 and stat.S_IMODE(os.stat(str(path)).st_mode) == 0o600
    assert _progress.last(path.read_text()) == {}
    p.write({"read": 1, "seconds": 5.0})
    p.write({"read": 2, "seconds": 10.0})
    assert _progress.last(path.read_text()) == {"read": 2, "seconds": 10.0}
    assert _progress.last(path.read_text() + '{"read": 3, "sec') == {"read": 2, "seconds": 10.0}  # a line half written
    p.close()
    assert not path.exists()


def test_an_earlier_file_is_emptied(tmp_path):
    path = tmp_path / "prewarm.jsonl"
    path.write_text(json.dumps({"read": 99}) + "\n")
    p = _progress.ProgressFile(str(path))
    assert path.read_text() == ""
    p.close()


@pytest.mark.parametrize("text, last", [
    ("", {}),
    ('{"read": 1}\n{"read": 2}\n', {"read": 2}),
    ('{"read": 1}\n{"read": 2}', {"read": 1}),  # no newline yet: the line is still being written
    ('{"read": 1}\n{"read": 2, "se', {"read": 1}),
    ('{"read": 1}\nnot json\n', {"read": 1}),
])
def test_the_last_whole_line(text, last):
    assert _progress.last(text) == last


def test_a_line_says_in_words_its_secrets_masked_where_it_is_written(tmp_path):
    path = tmp_path / "switch-progress.jsonl"
    p = _progress.ProgressFile(str(path), Redactor(values=["sk-given"]))
    p.say("loading, 4 s: --api-key sk-flag server_args=ServerArgs(api_key='sk q') sk-given HF_TOKEN=hf-env", seconds=4.0)
    assert _progress.last(path.read_text()) == {"seconds": 4.0, "says": (
        "loading, 4 s: --api-key {0} server_args=ServerArgs(api_key='{0}') {0} HF_TOKEN={0}".format(MASK))}
    for secret in ("sk-flag", "sk q", "sk-given", "hf-env"):
        assert secret not in path.read_text()
    p.close()


@pytest.mark.skipif(os.getuid() != 0, reason="needs root: a child becomes nobody")
def test_a_child_that_became_nobody_appends_through_the_descriptor(tmp_path):
    path = tmp_path / "prewarm.jsonl"
    p = _progress.ProgressFile(str(path))
    assert _owner.Owner(NOBODY.pw_uid, NOBODY.pw_gid).call(p.write, {"read": 7}) is None
    assert _progress.last(path.read_text()) == {"read": 7} and os.stat(str(path)).st_uid == 0
    assert _owner.Owner(NOBODY.pw_uid, NOBODY.pw_gid).call(lambda: p.say("reading", read=8)) is None
    assert _progress.last(path.read_text()) == {"read": 8, "says": "reading"}
    p.close()


@pytest.mark.skipif(os.getuid() != 0, reason="needs root: the folder is nobody's")
def test_never_in_a_folder_another_user_can_change_nor_through_a_link(tmp_path):
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    os.chown(str(theirs), NOBODY.pw_uid, NOBODY.pw_gid)
    with pytest.raises(OSError, match="no progress file in %s: .*owned by nobody" % theirs):
        _progress.ProgressFile(str(theirs / "prewarm.jsonl"))
    assert os.listdir(str(theirs)) == []
    (tmp_path / "elsewhere").write_text("root's\n")
    os.symlink(str(tmp_path / "elsewhere"), str(tmp_path / "prewarm.jsonl"))
    with pytest.raises(OSError):
        _progress.ProgressFile(str(tmp_path / "prewarm.jsonl"))
    assert (tmp_path / "elsewhere").read_text() == "root's\n"
