"""A venv and who controls it, on real venvs of the system's python: its folder, its owner, what keeps root from
running its interpreter, whether a path lies inside it, and its key."""
import os

import pytest

from ansible_collections.inferops.sglang.plugins.module_utils._host import venv as _venv

from ..conftest import NOBODY, double_venv

pytestmark = pytest.mark.skipif(os.getuid() != 0, reason="needs root: the venvs are root's and nobody's")


def test_the_folder_is_above_bin_and_the_owner_is_the_folders(nobody_venv):
    assert _venv.folder(nobody_venv.python) == str(nobody_venv.path)
    assert _venv.folder("/usr/bin/python3") == "/usr" and _venv.owner(nobody_venv.python).uid == NOBODY.pw_uid
    assert _venv.site_folders(str(nobody_venv.path)) == [str(nobody_venv.site)]


def test_roots_own_venv_is_trusted_until_a_pth_or_a_package_file_is_not_roots_alone(tmp_path):
    venv = double_venv(tmp_path)
    assert _venv.distrust(venv.python) is None
    pth = venv.site / "zz.pth"
    pth.write_text("")
    pth.chmod(0o666)
    assert _venv.distrust(venv.python) == "%s can be written by its group and everyone" % pth
    pth.unlink()
    inner = venv.site / "sglang" / "srt" / "server_args.py"
    os.chown(str(inner), NOBODY.pw_uid, 0)
    assert _venv.distrust(venv.python) == "%s is owned by nobody" % inner


def test_the_owners_venv_is_not_trusted(nobody_venv):
    assert _venv.distrust(nobody_venv.python) == "%s is owned by nobody" % nobody_venv.path


def test_inside_resolves_links_and_the_key_tells_venvs_apart(tmp_path):
    (tmp_path / "a" / "lib").mkdir(parents=True)
    (tmp_path / "b").mkdir()
    (tmp_path / "a" / "out").symlink_to(tmp_path / "b")
    assert _venv.inside(str(tmp_path / "a" / "lib"), str(tmp_path / "a"))
    assert not _venv.inside(str(tmp_path / "a" / "out"), str(tmp_path / "a"))
    assert not _venv.inside(str(tmp_path / "a"), str(tmp_path / "a"))  # the folder itself is not inside it
    assert not _venv.inside(str(tmp_path / "ab"), str(tmp_path / "a"))
    (tmp_path / "link").symlink_to(tmp_path / "a")
    assert _venv.key(str(tmp_path / "link")) == _venv.key(str(tmp_path / "a")) != _venv.key(str(tmp_path / "b"))
