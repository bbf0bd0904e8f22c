"""The strict applier and drift, against files of the real sglang 0.5.23 wheel and a real patch."""
import glob
import os
import zipfile

import pytest

from ansible_collections.inferops.sglang.plugins.module_utils._server import patch as _patch
from tests.unit.conftest import ROOT

WHEEL = sorted(glob.glob(str(ROOT / ".cache" / "wheels" / "real" / "sglang-0.5.23-*.whl")))
PATCH = (ROOT / "tests" / "fixtures" / "patches" / "eagle-spec-disable-batch-threshold.patch").read_text()
TARGET = "sglang/srt/speculative/eagle_worker_v2.py"
OTHER = "sglang/srt/speculative/eagle_info.py"

pytestmark = pytest.mark.skipif(not WHEEL, reason="the real wheel is fetched by `make test`'s setup stage")


@pytest.fixture
def tree(tmp_path):
    """site-packages holding the real files of the wheel that the tests touch, and its RECORD."""
    with zipfile.ZipFile(WHEEL[0]) as z:
        record = [n for n in z.namelist() if n.endswith(".dist-info/RECORD")][0]
        for name in (TARGET, OTHER, record):
            z.extract(name, tmp_path)
        lines = z.read(record).decode().splitlines()
    # keep only the rows of the extracted files, so drift is measured on them
    kept = [line for line in lines if line.split(",")[0] in (TARGET, OTHER)]
    (tmp_path / record).write_text("\n".join(kept) + "\n")
    return tmp_path


def dist_info(tree):
    return glob.glob(str(tree / "*.dist-info"))[0]


def read(tree, rel=TARGET):
    return (tree / rel).read_bytes()


def test_applies_then_is_already_in(tree):
    before = read(tree)
    plan = _patch.plan(str(tree), PATCH)
    assert plan.state == "apply" and list(plan.new) == [TARGET]
    _patch.keep(str(tree / "backup"), plan.old)
    _patch.write_atomic(str(tree), plan.new)
    after = read(tree)
    assert b"self.spec_disable_batch_threshold = None" in after
    assert (tree / "backup" / TARGET).read_bytes() == before, "the original is kept"
    assert _patch.plan(str(tree), PATCH).state == "applied"
    assert len(after.splitlines()) == len(before.splitlines()) + 2


def test_a_diff_without_its_last_newline_still_applies(tree):
    assert _patch.plan(str(tree), PATCH.rstrip("\n")).state == "apply"


def test_rejected_hunk_is_shown_and_nothing_changes(tree):
    text = read(tree).replace(b"        self.gpu_id = gpu_id\n        self.device = get_device().device",
                              b"        self.gpu_id = int(gpu_id)\n        self.device = get_device().device")
    (tree / TARGET).write_bytes(text)
    plan = _patch.plan(str(tree), PATCH)
    assert plan.state == "rejected"
    assert "+        self.spec_disable_batch_threshold = None" in plan.rejected[TARGET][0]
    assert read(tree) == text


def test_no_fuzz(tree):
    """A context line that differs by whitespace alone is a mismatch."""
    (tree / TARGET).write_bytes(read(tree).replace(b"        self.gpu_id = gpu_id\n", b"        self.gpu_id = gpu_id \n"))
    assert _patch.plan(str(tree), PATCH).state == "rejected"


def test_offset_is_found_when_unique(tree):
    (tree / TARGET).write_bytes(b"# a new first line\n" + read(tree))
    assert _patch.plan(str(tree), PATCH).state == "apply"


def test_two_file_patch_is_all_or_nothing(tree):
    other_hunk = ("--- a/%s\n+++ b/%s\n@@ -1,1 +1,1 @@\n-THIS LINE IS NOT IN THE FILE\n+x\n" % (OTHER, OTHER))
    before = read(tree)
    plan = _patch.plan(str(tree), PATCH + other_hunk)
    assert plan.state == "rejected" and OTHER in plan.rejected
    assert read(tree) == before


def test_write_atomic_puts_back_what_it_replaced_on_failure(tree, monkeypatch):
    first, second = read(tree, TARGET), read(tree, OTHER)
    calls = []
    real_replace = os.replace

    def failing_replace(src, dst):
        calls.append(dst)
        if len(calls) == 2:
            raise OSError("disk full")
        real_replace(src, dst)
    monkeypatch.setattr(_patch.os, "replace", failing_replace)
    with pytest.raises(OSError):
        _patch.write_atomic(str(tree), {TARGET: "changed\n", OTHER: "changed too\n"})
    assert read(tree, TARGET) == first and read(tree, OTHER) == second
    assert not [n for n in os.listdir(tree / os.path.dirname(TARGET)) if n.startswith(".inferops-")]


def test_drift_against_record(tree):
    rec = _patch.record(dist_info(tree))
    assert set(rec) == {TARGET, OTHER}
    assert _patch.drift(str(tree), rec) == []
    plan = _patch.plan(str(tree), PATCH)
    _patch.write_atomic(str(tree), plan.new)
    explained = {TARGET: _patch.sha256_record(read(tree))}
    assert _patch.drift(str(tree), rec, explained) == []
    assert _patch.drift(str(tree), rec) == [{"path": TARGET, "reason": "differs from RECORD"}]
    (tree / OTHER).write_bytes(read(tree, OTHER) + b"# edited by hand\n")
    assert _patch.drift(str(tree), rec, explained) == [{"path": OTHER, "reason": "differs from RECORD"}]


@pytest.mark.parametrize("bad", ["", "not a diff\n", "--- a/x\n+++ /dev/null\n@@ -1 +0,0 @@\n-x\n"])
def test_bad_diffs(bad):
    with pytest.raises(_patch.PatchError):
        _patch.parse(bad)
