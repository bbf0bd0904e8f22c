"""The compile caches: where each version puts them, their size read without following symlinks, and the unit's
environment that finds what a hand-launched server filled (HOME differs, a volatile /tmp default)."""
import os
import pathlib
import pwd
import shutil
import tempfile

import pytest

from ansible_collections.inferops.sglang.plugins.module_utils._host import caches as _caches

ME = pwd.getpwuid(os.getuid())


def test_each_version_puts_its_caches_where_its_wheel_says():
    old = _caches.paths({}, "/home/u", "u", "0.5.15")
    assert old["triton"][2] == "/home/u/.triton/cache" and old["inductor"][2] == "/tmp/torchinductor_u"
    assert old["flashinfer"][2] == "/home/u/.cache/flashinfer" and old["deep_gemm"][2] == "/home/u/.cache/deep_gemm"
    new = _caches.paths({"SGLANG_CACHE_DIR": "~/c"}, "/home/u", "u", "0.5.23")
    assert new["triton"][2] == "/home/u/c/triton" and new["inductor"][2] == "/home/u/c/inductor"
    assert new["flashinfer"][2] == "/home/u/c/.cache/flashinfer" and new["deep_gemm"][2] == "/home/u/c/deep_gemm"
    assert _caches.paths({"TRITON_CACHE_DIR": "/x"}, "/h", "u", "0.5.23")["triton"][2] == "/x"


def test_a_size_follows_no_symlink(tmp_path):
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "k.bin").write_bytes(b"x" * 100)
    (tmp_path / "big").write_bytes(b"x" * 5000)
    os.symlink(str(tmp_path / "big"), str(tmp_path / "c" / "link"))
    os.symlink(str(tmp_path), str(tmp_path / "c" / "loop"))
    assert _caches.size(str(tmp_path / "c")) == (100, 1, True)
    assert _caches.size(str(tmp_path / "missing"))[0] is None


@pytest.fixture
def home():
    """A shell's HOME outside /tmp (pytest's tmp_path is under it: volatile), and so outside the checkout, which may
    be under /tmp too: in this user's own home."""
    d = tempfile.mkdtemp(prefix=".inferops-home-", dir=ME.pw_dir)
    yield pathlib.Path(d)
    shutil.rmtree(d)


def test_the_unit_finds_what_the_hand_launch_filled_and_keeps_it_over_a_boot(home):
    """The shell's HOME was not the user's passwd home: the unit (HOME from passwd) is pointed at the caches the
    server filled; torch inductor's /tmp default, lost at a boot, moves under the user's home."""
    shell_home = home / "shell"
    (shell_home / ".triton" / "cache").mkdir(parents=True)
    env = {"HOME": str(shell_home), "TVM_FFI_CACHE_DIR": "/opt/tvm"}
    unit = _caches.unit_environment(env, None, ME.pw_name, "0.5.15", ME.pw_name)
    assert unit["TRITON_CACHE_DIR"] == str(shell_home / ".triton" / "cache")
    assert unit["TORCHINDUCTOR_CACHE_DIR"] == os.path.join(ME.pw_dir, ".cache", "torchinductor")
    assert unit["TVM_FFI_CACHE_DIR"] == "/opt/tvm", "the server's own variable, as it set it"
    again = _caches.unit_environment(dict(env, **unit), None, ME.pw_name, "0.5.15", ME.pw_name)
    assert again == unit, "made again from the unit's own server (a rerun), the same environment"
    assert not any(_caches.volatile(v) for v in unit.values()), unit
    found = dict((c["name"], c) for c in _caches.report(env, None, ME.pw_name, "0.5.15"))
    assert found["inductor"]["volatile"] and not found["triton"]["volatile"] and found["triton"]["bytes"] == 0
    # another user's unit never gets this user's folders: its own home's
    other = _caches.unit_environment(env, None, ME.pw_name, "0.5.15", "nobody")
    assert other["TRITON_CACHE_DIR"] == os.path.join(pwd.getpwnam("nobody").pw_dir, ".triton", "cache")
