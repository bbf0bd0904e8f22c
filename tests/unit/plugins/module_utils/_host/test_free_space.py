"""Whether the folders a step writes to can take it: real filesystems (tmpfs mounted in a private mount namespace,
full or read-only, as a host's state folder can be)."""
from ansible_collections.inferops.sglang.plugins.module_utils._host import free_space as _free_space
from ..conftest import in_mount_namespace


def test_room_enough_is_no_problem_and_a_missing_folder_is_looked_at_where_it_would_be_made(tmp_path):
    assert _free_space.existing(str(tmp_path / "a" / "b")) == str(tmp_path)
    assert _free_space.problems([("the state folder", str(tmp_path / "a" / "b"), 1024)]) == []


def test_a_full_filesystem_says_what_is_free_and_what_is_needed_for_its_folders_together(tmp_path):
    folder = tmp_path / "state"
    folder.mkdir()

    def look():
        with open(str(folder / "fill"), "wb") as f:
            f.write(b"x" * 60 * 1024)
        return (_free_space.problems([("the state folder", str(folder / "30000"), 20 * 1024)]),
                _free_space.problems([("the state folder", str(folder / "30000"), 20 * 1024),
                                      ("the folder", str(folder / "env"), 30 * 1024)]))
    alone, together = in_mount_namespace(look, str(folder), "size=100k")
    assert alone == []
    assert together == ["the state folder %s/30000 and the folder %s/env: 40 KiB free in its filesystem (%s), 50 KiB "
                        "needed" % (folder, folder, folder)]


def test_a_read_only_filesystem_cannot_take_anything(tmp_path):
    folder = tmp_path / "state"
    folder.mkdir()
    said = in_mount_namespace(lambda: _free_space.problems([("the state folder", str(folder / "30000"), 1)]),
                              str(folder), "size=100k,ro")
    assert said == ["the state folder %s/30000 cannot be written: %s is on a read-only filesystem" % (folder, folder)]
