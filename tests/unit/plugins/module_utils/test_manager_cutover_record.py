"""cutover_record's manager on real files: the record written once and kept, check mode, and what it refuses."""
import json
import os

import pytest

from ansible_collections.inferops.sglang.plugins.module_utils._manager_cutover_record import CutoverRecord

from .conftest import Exited, Failed, FakeModule

ROLLBACK = {"time": 1796058514.5, "host": "gpu-01", "port": 30000, "unit": "sglang-30000.service", "action": "rollback",
            "failure": "unit failed", "pid_started": 5120, "ready_after_sec": 3.2, "rollback_downtime_sec": 0.4,
            "rollback_steps": [{"step": "stop server", "seconds": 0.3}]}
NAMES = ["last.json", "history/20261130T170834Z-rollback.json", "last.md"]


class Module(FakeModule):
    """What the manager uses of AnsibleModule."""

    defaults = dict(kind="rollback", record=ROLLBACK, history=20, metrics_dir=None, restarts=None)


def result_of(module):
    with pytest.raises(Exited) as e:
        CutoverRecord(module).run()
    return e.value.args[0]


def test_the_record_is_written_once_then_kept(tmp_path):
    folder = tmp_path / "30000"
    r = result_of(Module(dir=str(folder)))
    paths = [str(folder / n) for n in NAMES]
    assert r["changed"] and r["files"] == paths and r["written"] == paths
    assert r["report"].startswith("# Rollback of port 30000 on gpu-01\n") and "- why: unit failed" in r["report"]
    assert json.loads((folder / "last.json").read_text()) == ROLLBACK
    assert (folder / NAMES[1]).read_text() == (folder / "last.json").read_text()
    assert (folder / "last.md").read_text() == r["report"]
    assert oct(folder.stat().st_mode & 0o777) == "0o700" and oct((folder / "last.md").stat().st_mode & 0o777) == "0o640"
    again = result_of(Module(dir=str(folder)))
    assert not again["changed"] and again["written"] == [] and again["files"] == paths
    later = dict(ROLLBACK, failure="the gate timed out")
    r = result_of(Module(dir=str(folder), record=later))
    assert r["changed"] and r["written"] == paths and json.loads((folder / "last.json").read_text()) == later


def test_check_mode_says_what_it_would_write_and_writes_nothing(tmp_path):
    folder = tmp_path / "30000"
    r = result_of(Module(check_mode=True, dir=str(folder), kind="cutover"))
    assert r["changed"] and r["written"] == [str(folder / n) for n in ("last.json", "history/20261130T170834Z-cutover.json", "last.md")]
    assert not folder.exists()


def test_a_file_changed_by_hand_is_written_again_alone(tmp_path):
    folder = tmp_path / "30000"
    result_of(Module(dir=str(folder)))
    (folder / "last.md").write_text("edited\n")
    os.chmod(str(folder / "last.json"), 0o644)
    r = result_of(Module(dir=str(folder)))
    assert r["changed"] and r["written"] == [str(folder / "last.json"), str(folder / "last.md")]
    assert (folder / "last.md").read_text().startswith("# Rollback") and oct((folder / "last.json").stat().st_mode & 0o777) == "0o640"


@pytest.mark.parametrize("folder, record, message", [
    ("state/30000", ROLLBACK, "the record's folder must be an absolute path, not 'state/30000'"),
    (None, dict(ROLLBACK, time=None), "needs its time"),
])
def test_a_relative_folder_or_a_record_without_its_time_is_refused(tmp_path, folder, record, message):
    with pytest.raises(Failed, match=message) as e:
        CutoverRecord(Module(dir=folder or str(tmp_path / "30000"), record=record)).run()
    assert e.value.args[0]["failed"] and not (tmp_path / "30000").exists()


def test_a_folder_that_cannot_be_made_fails_with_the_file_and_why(tmp_path):
    (tmp_path / "state").write_text("a file where the folder should be\n")
    with pytest.raises(Failed) as e:
        CutoverRecord(Module(dir=str(tmp_path / "state" / "30000"))).run()
    msg = e.value.args[0]["msg"]
    assert msg.startswith("could not write %s: " % (tmp_path / "state" / "30000" / "last.json")) and "Not a directory" in msg
    assert (tmp_path / "state").read_text() == "a file where the folder should be\n"


def test_the_history_keeps_the_newest_records_and_takes_in_the_earlier_releases(tmp_path):
    """Each run's record in history/, the newest `history` kept; one that 0.2.0 kept beside last.json moves there
    (and counts). Check mode names what would go and removes nothing."""
    folder = tmp_path / "30000"
    folder.mkdir(mode=0o700)
    (folder / "cutover-20261101T000000Z.json").write_text("{}\n")  # 0.2.0's
    for day in (2, 3):
        result_of(Module(dir=str(folder), record=dict(ROLLBACK, time=ROLLBACK["time"] - 86400 * (30 - day))))
    history = folder / "history"
    assert sorted(os.listdir(str(history))) == ["20261101T000000Z-cutover.json", "20261102T170834Z-rollback.json",
                                                "20261103T170834Z-rollback.json"]
    assert not (folder / "cutover-20261101T000000Z.json").exists()
    look = result_of(Module(dir=str(folder), history=2, check_mode=True))
    assert look["changed"] and look["removed"] == [str(history / "20261101T000000Z-cutover.json"),
                                                   str(history / "20261102T170834Z-rollback.json")]
    assert len(os.listdir(str(history))) == 3
    r = result_of(Module(dir=str(folder), history=2))
    assert r["removed"] == look["removed"] and sorted(os.listdir(str(history))) == [
        "20261103T170834Z-rollback.json", "20261130T170834Z-rollback.json"]
    again = result_of(Module(dir=str(folder), history=2))
    assert not again["changed"] and again["removed"] == []
    assert oct(history.stat().st_mode & 0o777) == "0o700"


@pytest.mark.skipif(os.geteuid() != 0, reason="the textfile's folder must be root's")
def test_the_record_and_its_textfile_are_written_together_once_check_mode_writing_neither(tmp_path):
    folder, metrics = tmp_path / "30000", tmp_path / "textfile"
    metrics.mkdir(mode=0o755)
    prom = str(metrics / "inferops_sglang_30000.prom")
    look = result_of(Module(check_mode=True, dir=str(folder), metrics_dir=str(metrics)))
    assert look["changed"] and look["written"] == [str(folder / n) for n in NAMES] + [prom] and look["metrics"] == [prom]
    assert not folder.exists() and os.listdir(str(metrics)) == []
    r = result_of(Module(dir=str(folder), metrics_dir=str(metrics)))
    assert r["changed"] and r["written"] == look["written"]
    assert "inferops_sglang_last_result{port=\"30000\",result=\"rolled_back\"} 1\n" in open(prom).read()
    assert oct(os.stat(prom).st_mode & 0o7777) == "0o644" and os.stat(prom).st_uid == 0
    again = result_of(Module(dir=str(folder), metrics_dir=str(metrics)))
    assert not again["changed"] and again["written"] == []
    figures = result_of(Module(dir=str(folder), record=None, metrics_dir=str(metrics)))
    assert not figures["changed"] and figures["files"] == [] and figures["report"] is None


def test_a_history_that_cannot_be_cut_is_a_warning_the_record_kept(tmp_path, monkeypatch):
    """As the switch says it: the record is in place; an older one in history/ that could not go is not a failure."""
    from ansible_collections.inferops.sglang.plugins.module_utils._switch import record as _record

    def refused(folder, keep):
        raise OSError(13, "Permission denied")
    monkeypatch.setattr(_record, "tidy", refused)
    module = Module(dir=str(tmp_path / "30000"))
    r = result_of(module)
    assert r["changed"] and r["removed"] == [] and (tmp_path / "30000" / "last.json").exists()
    assert module.warnings == ["the record is written, but its history could not be cut to 20: [Errno 13] Permission denied"]
