"""model_prewarm's manager on real files evicted from the page cache: read as the given user, its progress appended
meanwhile and the file removed after, check mode and files all resident read nothing, bad input refused."""
import json
import os
import re
import time

import pytest

from ansible_collections.inferops.sglang.plugins.module_utils._host import pagecache as _pagecache
from ansible_collections.inferops.sglang.plugins.module_utils._manager_model_prewarm import ModelPrewarm, progress_line
from .conftest import MIB, NOBODY, Exited, Failed, FakeModule, evict, write


class Module(FakeModule):
    """What the manager uses of AnsibleModule."""

    defaults = dict(user="root", group=None, budget=60, margin_gib=0, progress=None, every=5.0)


@pytest.fixture
def cold(tmp_path, kept):
    """Two model files out of the page cache; what a warm reads of them stays (kept)."""
    paths = [write(tmp_path / "model-1.safetensors", 8 * MIB), write(tmp_path / "model-2.safetensors", 8 * MIB)]
    for p in paths:
        evict(p)
    return [str(p) for p in paths]


def result_of(module):
    with pytest.raises(Exited) as e:
        ModelPrewarm(module).run()
    return e.value.args[0]


def test_the_warm_reads_what_is_missing_and_says_so(cold, tmp_path, monkeypatch):
    real = _pagecache.warm

    def watched(paths, margin, budget, readers, progress, every):
        """The warm (in the child that became the user), with the progress file as a look from outside sees it
        after each line, kept in a file (the child's memory is its own)."""
        def look(data):
            progress(data)
            with open(str(tmp_path / "seen"), "a") as f:
                f.write(json.dumps((tmp_path / "state" / "prewarm.jsonl").read_text()) + "\n")
        return real(paths, margin, budget, readers, look, 0.001)

    def slow(*args):  # each window read lasts long enough for lines of progress to come
        time.sleep(0.2)
        return real_read(*args)

    real_read = _pagecache._read
    monkeypatch.setattr(_pagecache, "warm", watched)
    monkeypatch.setattr(_pagecache, "_read", slow)
    r = result_of(Module(paths=cold, progress=str(tmp_path / "state" / "prewarm.jsonl")))
    assert not r["changed"] and r["files"] == 2 and r["bytes"] == 16 * MIB and r["resident"] < 16 * MIB
    assert r["warm"]["resident_after"] == 16 * MIB and r["warm"]["read"] >= 16 * MIB - r["resident"]
    assert r["summary"].startswith("model: 17 MB in 2 files, ") and "; warmed before the stop: " in r["summary"]
    seen = [json.loads(line) for line in (tmp_path / "seen").read_text().splitlines()]
    assert seen and all(json.loads(s.splitlines()[-1])["planned"] > 0 for s in seen)
    # the module's own words: a line at once, then one with each measure
    assert re.match(r"warming the page cache, \d+ s: starting\Z", json.loads(seen[0].splitlines()[0])["says"])
    assert all(re.match(r"warming the page cache, \d+ s: [0-9.]+ [kMG]?B of 17 MB read\Z", json.loads(s.splitlines()[-1])["says"])
               for s in seen), seen
    assert not (tmp_path / "state" / "prewarm.jsonl").exists()


@pytest.mark.parametrize("check_mode, skipped", [(True, "check mode"), (False, "all resident")])
def test_check_mode_and_files_all_resident_read_nothing(cold, check_mode, skipped):
    if not check_mode:
        _pagecache.warm(cold, 0, 60)
    else:
        assert _pagecache.residency(cold)["resident"] < 16 * MIB
    r = result_of(Module(paths=cold, check_mode=check_mode))
    assert r["warm"] is None and r["warm_skipped"] == skipped and r["summary"].endswith("; not warmed: " + skipped)
    if check_mode:
        assert _pagecache.residency(cold)["resident"] < 16 * MIB


@pytest.mark.skipif(os.getuid() != 0, reason="needs root: the files are read as nobody")
def test_files_the_user_cannot_read_are_errors_and_not_read(cold, tmp_path):
    os.chmod(str(tmp_path), 0o700)
    r = result_of(Module(paths=cold, user=str(NOBODY.pw_uid)))
    assert r["bytes"] == 0 and len(r["errors"]) == 2 and "Permission denied" in r["errors"][0]
    assert _pagecache.residency(cold)["resident"] < 16 * MIB


@pytest.mark.parametrize("given, message", [
    (dict(budget=-1), "budget and margin_gib must be >= 0, not -1 and 0"),
    (dict(margin_gib=-2), "budget and margin_gib must be >= 0, not 60 and -2"),
    (dict(user="no-such-user-here"), "the user no-such-user-here is not known on the host"),
    (dict(user="root", group="no-such-group-here"), "the user root or the group no-such-group-here is not known"),
])
def test_bad_input_is_refused(cold, given, message):
    with pytest.raises(Failed, match=message):
        ModelPrewarm(Module(paths=cold, **given)).run()


@pytest.mark.parametrize("done, elapsed, says", [
    ({}, 2.5, "warming the page cache, 2 s: starting"),
    ({"planned": 60000000000, "read": 14200000000}, 45.9, "warming the page cache, 45 s: 14 GB of 60 GB read"),
    ({"planned": "x"}, 7, "warming the page cache, 7 s: starting"),
])
def test_the_progress_line_says_the_seconds_and_what_was_read_of_what_is_planned(done, elapsed, says):
    assert progress_line(done, elapsed) == says
