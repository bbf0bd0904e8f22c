"""The record of a cutover or a rollback: its files and its markdown."""
import json
import os

import pytest

from ansible_collections.inferops.sglang.plugins.module_utils._switch import record as _record

CUTOVER = {
    "time": 1796058514.5, "host": "gpu-01", "port": 30000, "unit": "sglang-30000.service", "action": "switch",
    "old": {"pid": 4242, "command": "python -m sglang.launch_server --port 30000", "family": [4242, 4250, 4251],
            "boot_launchers": [{"path": "/var/spool/cron/crontabs/root", "line": "@reboot x"},
                               {"path": "/var/spool/cron/crontabs/root", "line": "@reboot y"}]},
    "boot_launchers_handling": "disable", "model": "tiny-llama", "sglang_version": "0.5.23",
    "downtime_switch_sec": 0.28, "load_sec": 11.0, "downtime_until_ready_sec": 11.28,
    "stages_sec": {"verify": 11.2, "discover": 0.9, "switch": 0.7, "adopt": 0.1, "prepare": 1.5},
    "steps": [{"step": "stop server", "seconds": 0.19}, {"step": "start unit", "seconds": 0.06}],
    "unit_path": "/etc/systemd/system/sglang-30000.service", "unit_checksum": "ab12", "environment_names": ["A", "B"],
    "patches": {}, "nccl": [], "bench": [], "changes": ["--port kept", "environment: PWD dropped"],
}


def test_the_files_are_last_json_a_stamped_copy_and_last_md(tmp_path):
    files = _record.files(str(tmp_path / "30000"), "cutover", CUTOVER)
    assert [os.path.relpath(f.path, str(tmp_path / "30000")) for f in files] == [
        "last.json", "history/20261130T170834Z-cutover.json", "last.md"]
    for f in files:
        f.write()
    assert json.loads((tmp_path / "30000" / "last.json").read_text()) == CUTOVER
    assert oct((tmp_path / "30000").stat().st_mode & 0o777) == "0o700"
    assert oct((tmp_path / "30000" / "last.md").stat().st_mode & 0o777) == "0o640"
    assert not any(f.differs for f in _record.files(str(tmp_path / "30000"), "cutover", CUTOVER))


def test_the_cutover_report_says_what_an_operator_looks_for():
    text = _record.report(CUTOVER)
    assert text.startswith("# Cutover of port 30000 on gpu-01\n")
    assert "- when: 2026-11-30 17:08:34 UTC" in text
    assert "- action: switch; sglang-30000.service serves tiny-llama (sglang 0.5.23)" in text
    assert "- old server: pid 4242, 3 processes: `python -m sglang.launch_server --port 30000`" in text
    assert "- downtime: 0.28 s switch + 11.0 s load = 11.28 s until ready" in text
    assert "- stages: discover 0.9 s, adopt 0.1 s, prepare 1.5 s, switch 0.7 s, verify 11.2 s" in text
    assert "- switch steps: stop server 0.19 s, start unit 0.06 s" in text
    assert "- boot launchers: /var/spool/cron/crontabs/root (disable)" in text
    assert "- patches: none; NCCL: none" in text and "throughput" not in text
    assert text.endswith("- what changed from the running command:\n  - --port kept\n  - environment: PWD dropped\n")


def test_a_gated_cutover_reports_the_throughput_table():
    bench = [{"concurrency": 1, "baseline": 50.0, "service": 49.0, "change_pct": -2.0}]
    assert "- throughput (output tok/s, SGLang's bench_serving): C=1 50.0 -> 49.0 (-2.0 %)" in _record.report(
        dict(CUTOVER, bench=bench))


def test_a_rollback_report_says_why_and_what_serves_again():
    text = _record.report({"time": 1796058514.5, "host": "gpu-01", "port": 30000, "unit": "sglang-30000.service",
                           "action": "rollback", "capture": "/var/lib/inferops/cutover/30000/capture.json",
                           "failure": "unit failed", "pid_started": 5120, "ready_after_sec": 3.2,
                           "rollback_downtime_sec": 0.4, "rollback_steps": [{"step": "stop server", "seconds": 0.3}]})
    assert text.startswith("# Rollback of port 30000 on gpu-01\n") and "- why: unit failed" in text
    assert "serves again: pid 5120, ready after 3.2 s; sglang-30000.service is disabled" in text
    assert "steps: stop server 0.3 s" in text


@pytest.mark.parametrize("bad", [{}, {"time": None}, {"time": "soon"}])
def test_a_record_without_its_time_is_refused(tmp_path, bad):
    with pytest.raises(ValueError, match="needs its time"):
        _record.files(str(tmp_path), "cutover", bad)


def test_a_relative_folder_is_refused():
    with pytest.raises(ValueError, match="absolute path"):
        _record.files("state/30000", "cutover", CUTOVER)


def test_the_report_says_how_much_of_the_model_the_page_cache_held():
    line = "model: 712 GB in 163 files, 41 % in the page cache, 1.1 TB available"
    assert "\n- %s\n" % line in _record.report(dict(CUTOVER, model_cache={"files": 163, "summary": line}))
    assert "\n- model: not measured\n" in _record.report(CUTOVER)


@pytest.mark.parametrize("write, where", [(True, "/var/lib/inferops/cutover/30000"), (False, None)])
def test_the_record_of_a_switch_goes_to_the_ports_state_folder_unless_only_returned(write, where):
    insp = dict(family=[dict(pid=7), dict(pid=8)], gpus=[0])
    plan = _record.switch_plan(dict(write=write, data={"host": "h"}, history=5), "/var/lib/inferops/cutover/30000",
                               insp, "0.5.9", None)
    assert plan == dict(dir=where, data={"host": "h"}, family=[7, 8], gpus=[0], sglang_version="0.5.9",
                        installed=None, units=[], history=5)
    assert _record.switch_plan(None, "/var/lib/inferops/cutover/30000", insp, "0.5.9", None) is None


def test_the_history_is_cut_to_the_newest_in_a_folder_of_the_writers_own(tmp_path):
    folder = tmp_path / "30000"
    for stamp in ("20261101T000000Z", "20261102T000000Z", "20261103T000000Z"):
        for f in _record.files(str(folder), "cutover", dict(CUTOVER, time=_stamp_time(stamp))):
            f.write()
    assert _record.cut(str(folder), 3, []) == []
    new = _record.files(str(folder), "rollback", dict(CUTOVER, time=_stamp_time("20261104T000000Z")))
    assert _record.cut(str(folder), 3, new) == [str(folder / "history" / "20261101T000000Z-cutover.json")]
    gone = ("20261101T000000Z-cutover.json", "20261102T000000Z-cutover.json")
    assert _record.tidy(str(folder), 1) == [str(folder / "history" / n) for n in gone]
    assert os.listdir(str(folder / "history")) == ["20261103T000000Z-cutover.json"]
    for keep in (0, -1, True, "3"):
        with pytest.raises(ValueError, match="the history keeps at least 1 record, not"):
            _record.cut(str(folder), keep, [])
    assert _record.tidy(str(tmp_path / "none"), 1) == []


def _stamp_time(stamp):
    import calendar
    import time
    return calendar.timegm(time.strptime(stamp, "%Y%m%dT%H%M%SZ"))
