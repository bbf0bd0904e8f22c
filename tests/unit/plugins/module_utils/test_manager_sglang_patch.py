"""sglang_patch's manager on a real venv holding files of the real sglang 0.5.23 wheel and a real patch: applied,
kept, re-applied after a reinstall, reverted, refused; the record it keeps."""
import glob
import json
import os
import subprocess
import sys
import zipfile

import pytest

from ansible_collections.inferops.sglang.plugins.module_utils._server import patch as _patch
from ansible_collections.inferops.sglang.plugins.module_utils._host import venv as _venv
from ansible_collections.inferops.sglang.plugins.module_utils._manager_sglang_patch import SglangPatch

from .conftest import NOBODY, ROOT, Exited, Failed, FakeModule, chown_tree

WHEEL = sorted(glob.glob(str(ROOT / ".cache" / "wheels" / "real" / "sglang-0.5.23-*.whl")))
NAME = "eagle-spec-disable-batch-threshold"
PATCH = (ROOT / "tests" / "fixtures" / "patches" / (NAME + ".patch")).read_text()
TARGET = "sglang/srt/speculative/eagle_worker_v2.py"
OTHER = "sglang/srt/speculative/eagle_info.py"

pytestmark = pytest.mark.skipif(not WHEEL, reason="the real wheel is fetched by `make test`'s setup stage")


def wheel_venv(folder, python=sys.executable):
    """A venv whose site-packages holds the wheel's files that the tests touch, its metadata and its RECORD (of
    those files and itself only, so that drift is measured on them)."""
    subprocess.run([python, "-m", "venv", "--without-pip", str(folder / "venv")], check=True)
    site = glob.glob(str(folder / "venv" / "lib" / "python*" / "site-packages"))[0]
    with zipfile.ZipFile(WHEEL[0]) as z:
        for name in (TARGET, OTHER, "sglang-0.5.23.dist-info/METADATA", "sglang-0.5.23.dist-info/RECORD"):
            z.extract(name, site)
        rows = z.read("sglang-0.5.23.dist-info/RECORD").decode().splitlines()
    with open(site + "/sglang-0.5.23.dist-info/RECORD", "w") as f:
        f.write("\n".join(r for r in rows if r.split(",")[0] in (TARGET, OTHER, "sglang-0.5.23.dist-info/RECORD")) + "\n")
    return {"python": str(folder / "venv" / "bin" / "python"), "site": site,
            "original": {rel: open(site + "/" + rel, "rb").read() for rel in (TARGET, OTHER)}}


@pytest.fixture
def venv(tmp_path):
    return wheel_venv(tmp_path)


class Module(FakeModule):
    """What the manager uses of AnsibleModule."""

    defaults = dict(state="applied", redact=[])


def patch_module(tmp_path, venv, check_mode=None, diff_mode=None, **patch):
    return Module(check_mode, diff_mode, python=venv["python"], backup_dir=str(tmp_path / "backup"),
                  record_path=str(tmp_path / "state" / "patches.json"),
                  patches=[dict(dict(name=NAME, versions=["0.5.23"], diff=PATCH), **patch)])


def result_of(module, **params):
    module.params.update(params)
    with pytest.raises(Exited) as e:
        SglangPatch(module).run()
    assert not e.value.args[0].get("failed"), e.value.args[0]["msg"]
    return e.value.args[0]


def failure(module):
    with pytest.raises(Failed) as e:
        SglangPatch(module).run()
    return e.value.args[0]


def backup_of(tmp_path, venv):
    """Where the originals of this venv are kept: a folder per venv (its resolved path's key), then per patch."""
    return tmp_path / "backup" / _venv.key(os.path.dirname(os.path.dirname(venv["python"]))) / NAME


def content(venv, rel=TARGET):
    with open(venv["site"] + "/" + rel, "rb") as f:
        return f.read()


def test_applied_then_kept_then_reverted_byte_for_byte(tmp_path, venv):
    r = result_of(patch_module(tmp_path, venv, diff_mode=True))
    assert r["changed"] and r["version"] == "0.5.23" and r["root"] == venv["site"] and r["events"] == []
    (row,) = r["patches"]
    assert row["status"] == "applied" and row["backup"] == str(backup_of(tmp_path, venv))
    assert b"self.spec_disable_batch_threshold = None" in content(venv)
    assert row["files"] == {TARGET: _patch.sha256_record(content(venv))} and r["drift"] == []
    assert (backup_of(tmp_path, venv) / TARGET).read_bytes() == venv["original"][TARGET]
    assert r["diff"] == {"prepared": PATCH}
    rec = json.loads((tmp_path / "state" / "patches.json").read_text())
    assert rec["patches"] == [{"name": NAME, "versions": ["0.5.23"], "files": row["files"], "state": "applied"}]
    assert rec["version"] == "0.5.23" and rec["root"] == venv["site"] and rec["history"] == []

    again = result_of(patch_module(tmp_path, venv))
    assert not again["changed"] and again["patches"][0]["status"] == "already applied"
    assert json.loads((tmp_path / "state" / "patches.json").read_text())["time"] == rec["time"], "the record is kept"

    back = result_of(patch_module(tmp_path, venv), state="reverted")
    assert back["changed"] and back["patches"][0]["status"] == "reverted" and back["drift"] == []
    assert content(venv) == venv["original"][TARGET]
    assert json.loads((tmp_path / "state" / "patches.json").read_text())["patches"][0]["state"] == "original"
    assert result_of(patch_module(tmp_path, venv), state="reverted")["patches"][0]["status"] == "already original"


def test_a_patch_a_reinstall_wiped_is_applied_again_and_said_so(tmp_path, venv):
    result_of(patch_module(tmp_path, venv))
    with open(venv["site"] + "/" + TARGET, "wb") as f:
        f.write(venv["original"][TARGET])  # what pip install --force-reinstall leaves
    r = result_of(patch_module(tmp_path, venv))
    assert r["changed"] and r["patches"][0]["status"] == "applied"
    why = "its changes were gone (sglang reinstalled?); re-applied"
    assert r["events"] == [{"patch": NAME, "reason": why}]
    assert r["drift"] == [{"path": TARGET, "reason": "patch %s was gone (sglang reinstalled?); re-applied" % NAME}]
    history = json.loads((tmp_path / "state" / "patches.json").read_text())["history"]
    assert [dict(h, time=None) for h in history] == [{"patch": NAME, "reason": why, "time": None}]


def test_a_file_edited_by_hand_is_drift(tmp_path, venv):
    with open(venv["site"] + "/" + OTHER, "ab") as f:
        f.write(b"# edited by hand\n")
    r = result_of(patch_module(tmp_path, venv))
    assert r["drift"] == [{"path": OTHER, "reason": "differs from RECORD"}]


def test_check_mode_changes_no_file_and_writes_no_record(tmp_path, venv):
    r = result_of(patch_module(tmp_path, venv, check_mode=True))
    assert r["changed"] and r["patches"][0]["status"] == "applied" and r["drift"] == []
    assert content(venv) == venv["original"][TARGET] and not (tmp_path / "state").exists()
    assert not (tmp_path / "backup").exists()


def test_another_version_fails_or_is_skipped_as_asked(tmp_path, venv):
    out = failure(patch_module(tmp_path, venv, versions=["0.5.9"]))
    assert out["msg"].startswith("patch %s is for sglang 0.5.9; the installed version is 0.5.23." % NAME)
    assert out["version"] == "0.5.23" and not (tmp_path / "state").exists()
    r = result_of(patch_module(tmp_path, venv, versions=["0.5.9"], on_other_version="skip"))
    assert r["patches"][0]["status"] == "skipped (sglang 0.5.23 not in ['0.5.9'])" and content(venv) == venv["original"][TARGET]
    assert json.loads((tmp_path / "state" / "patches.json").read_text())["patches"][0]["state"] == "skipped"


def test_a_patch_that_neither_applies_nor_is_in_changes_nothing(tmp_path, venv):
    changed = content(venv).replace(b"        self.gpu_id = gpu_id\n", b"        self.gpu_id = int(gpu_id)\n")
    with open(venv["site"] + "/" + TARGET, "wb") as f:
        f.write(changed)
    out = failure(patch_module(tmp_path, venv))
    assert out["msg"].startswith("patch %s neither applies to sglang 0.5.23 nor is already in; nothing was changed." % NAME)
    assert list(out["rejected"]) == [TARGET] and content(venv) == changed and not (tmp_path / "backup").exists()
    assert failure(patch_module(tmp_path, venv, diff="not a diff\n"))["msg"].startswith("patch %s: " % NAME)


def test_an_interpreter_without_sglang_is_refused_without_importing_it(tmp_path, venv):
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(tmp_path / "bare")], check=True)
    out = failure(Module(python=str(tmp_path / "bare" / "bin" / "python"), patches=[], backup_dir=str(tmp_path),
                         record_path=None))
    assert out["msg"].startswith("cannot read the sglang package's metadata with %s as root (uid 0, gid 0) (never "
                                 "importing it): " % (tmp_path / "bare" / "bin" / "python"))
    assert "PackageNotFoundError" in out["msg"]


@pytest.fixture
def nobodys(public_dir):
    """wheel_venv of the system's python, nobody's, with a zz_evil.pth that appends the uid it runs as to `uids`."""
    v = wheel_venv(public_dir, "/usr/bin/python3")
    uids = public_dir / "uids"
    uids.touch()
    uids.chmod(0o666)
    with open(v["site"] + "/zz_evil.pth", "w") as f:
        f.write("import os; open(%r, 'a').write('%%d\\n' %% os.getuid())\n" % str(uids))
    chown_tree(public_dir / "venv", NOBODY.pw_uid, NOBODY.pw_gid)
    v["uids"] = uids
    return v


@pytest.mark.skipif(os.getuid() != 0, reason="needs root: the venv is nobody's")
def test_the_owners_venv_is_asked_and_patched_as_its_owner(tmp_path, nobodys):
    """The query of site-packages runs as nobody (their .pth never runs as root); the patched file is written by
    nobody; the backup is root's."""
    r = result_of(patch_module(tmp_path, nobodys))
    assert r["patches"][0]["status"] == "applied" and b"spec_disable_batch_threshold = None" in content(nobodys)
    uids = [int(x) for x in nobodys["uids"].read_text().split()]
    assert uids and set(uids) == {NOBODY.pw_uid}
    assert os.stat(nobodys["site"] + "/" + TARGET).st_uid == NOBODY.pw_uid
    assert (backup_of(tmp_path, nobodys) / TARGET).stat().st_uid == 0
    assert result_of(patch_module(tmp_path, nobodys), state="reverted")["patches"][0]["status"] == "reverted"
    assert content(nobodys) == nobodys["original"][TARGET]


@pytest.mark.skipif(os.getuid() != 0, reason="needs root: the venv is nobody's")
def test_a_site_packages_linked_outside_the_venv_is_refused(tmp_path, nobodys, public_dir):
    """nobody makes their site-packages a link to a folder outside the venv: nothing is read or written there."""
    outside = public_dir / "elsewhere"
    os.rename(nobodys["site"], str(outside))
    os.symlink(str(outside), nobodys["site"])
    os.lchown(nobodys["site"], NOBODY.pw_uid, NOBODY.pw_gid)
    before = (outside / TARGET).read_bytes()
    out = failure(patch_module(tmp_path, nobodys))
    assert out["msg"].startswith("%s says the sglang package's root is %s, outside the venv %s once its links are "
                                 "resolved" % (nobodys["python"], nobodys["site"], public_dir / "venv")), out["msg"]
    assert (outside / TARGET).read_bytes() == before and not (tmp_path / "backup").exists()


@pytest.mark.skipif(os.getuid() != 0, reason="needs root: the venv is nobody's")
def test_a_file_linked_to_a_root_only_file_is_never_read_into_the_backup(tmp_path, nobodys):
    secret = tmp_path / "secret"
    secret.write_bytes(nobodys["original"][TARGET])  # what the patch would apply to
    secret.chmod(0o600)
    target = nobodys["site"] + "/" + TARGET
    os.unlink(target)
    os.symlink(str(secret), target)
    out = failure(patch_module(tmp_path, nobodys))
    assert out["msg"].startswith("patch %s: " % NAME) and not (tmp_path / "backup").exists()
    assert secret.read_bytes() == nobodys["original"][TARGET]


def test_a_backup_of_one_venv_is_never_applied_to_another(tmp_path):
    """Two venvs, one patch: venv a's originals are kept for a; reverting b, never patched, finds no backup of its
    own and leaves b's own edit alone."""
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    a, b = wheel_venv(tmp_path / "a"), wheel_venv(tmp_path / "b")
    result_of(patch_module(tmp_path, a))
    edited = b["original"][TARGET] + b"# b's own edit\n"
    with open(b["site"] + "/" + TARGET, "wb") as f:
        f.write(edited)
    r = result_of(patch_module(tmp_path, b), state="reverted")
    assert r["patches"][0]["status"] == "nothing to revert (no backup of %s for this venv)" % NAME
    assert content(b) == edited


@pytest.mark.parametrize("name", ["../../etc", ".hidden", "a/b", "ok\n"])
def test_a_name_that_is_no_folder_name_fails_before_anything(tmp_path, venv, name):
    out = failure(patch_module(tmp_path, venv, name=name))
    assert out["msg"] == ("a patch's name is letters, digits, '.', '_' and '-' (not starting with a dot or a dash), "
                          "also its backup folder's: not %r" % name)
    assert content(venv) == venv["original"][TARGET] and not (tmp_path / "backup").exists()
