"""sglang_patch's manager on a real venv holding files of the real sglang 0.5.23 wheel and a real patch: applied,
kept, re-applied after a reinstall, reverted, refused; the record it keeps."""
import glob
import json
import subprocess
import sys
import zipfile

import pytest

from ansible_collections.inferops.sglang.plugins.module_utils import _patch
from ansible_collections.inferops.sglang.plugins.module_utils._manager_sglang_patch import SglangPatch

from .conftest import ROOT, Exited, Failed, FakeModule

WHEEL = sorted(glob.glob(str(ROOT / ".cache" / "wheels" / "real" / "sglang-0.5.23-*.whl")))
NAME = "eagle-spec-disable-batch-threshold"
PATCH = (ROOT / "tests" / "fixtures" / "patches" / (NAME + ".patch")).read_text()
TARGET = "sglang/srt/speculative/eagle_worker_v2.py"
OTHER = "sglang/srt/speculative/eagle_info.py"

pytestmark = pytest.mark.skipif(not WHEEL, reason="the real wheel is fetched by `make test`'s setup stage")


@pytest.fixture
def venv(tmp_path):
    """A venv whose site-packages holds the wheel's files that the tests touch, its metadata and its RECORD (of
    those files and itself only, so that drift is measured on them)."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(tmp_path / "venv")], check=True)
    site = glob.glob(str(tmp_path / "venv" / "lib" / "python*" / "site-packages"))[0]
    with zipfile.ZipFile(WHEEL[0]) as z:
        for name in (TARGET, OTHER, "sglang-0.5.23.dist-info/METADATA", "sglang-0.5.23.dist-info/RECORD"):
            z.extract(name, site)
        rows = z.read("sglang-0.5.23.dist-info/RECORD").decode().splitlines()
    with open(site + "/sglang-0.5.23.dist-info/RECORD", "w") as f:
        f.write("\n".join(r for r in rows if r.split(",")[0] in (TARGET, OTHER, "sglang-0.5.23.dist-info/RECORD")) + "\n")
    return {"python": str(tmp_path / "venv" / "bin" / "python"), "site": site,
            "original": {rel: open(site + "/" + rel, "rb").read() for rel in (TARGET, OTHER)}}


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


def content(venv, rel=TARGET):
    with open(venv["site"] + "/" + rel, "rb") as f:
        return f.read()


def test_applied_then_kept_then_reverted_byte_for_byte(tmp_path, venv):
    r = result_of(patch_module(tmp_path, venv, diff_mode=True))
    assert r["changed"] and r["version"] == "0.5.23" and r["root"] == venv["site"] and r["events"] == []
    (row,) = r["patches"]
    assert row["status"] == "applied" and row["backup"] == str(tmp_path / "backup" / NAME)
    assert b"self.spec_disable_batch_threshold = None" in content(venv)
    assert row["files"] == {TARGET: _patch.sha256_record(content(venv))} and r["drift"] == []
    assert (tmp_path / "backup" / NAME / TARGET).read_bytes() == venv["original"][TARGET]
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
    assert out["msg"].startswith("cannot read the sglang package's metadata with %s (never importing it): "
                                 % (tmp_path / "bare" / "bin" / "python"))
    assert "PackageNotFoundError" in out["msg"]
