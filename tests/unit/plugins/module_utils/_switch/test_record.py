"""The record of a cutover or a rollback: its files and its markdown."""
import json
import os
import re

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


# The port's figures for node_exporter's textfile collector (metrics, textfile) and Keep, the one writer of the record
# and of them. The figures are read back with prometheus_client's text-format parser, as Prometheus reads them.

SWITCH = {"action": "switch", "host": "gpu-01", "port": 30000, "unit": "sglang-30000.service", "time": 1764500000.5,
          "sglang_version": "0.5.15", "model": "/models/tiny-llama", "downtime_switch_sec": 0.412, "load_sec": 3.105,
          "downtime_until_ready_sec": 3.517, "generated": True, "stages_sec": {"discover": 0.2, "switch": 0.6}}
ROLLBACK = {"action": "rollback", "host": "gpu-01", "port": 30000, "unit": "sglang-30000.service",
            "time": 1764500100.25, "failure": "rolled back on purpose", "rollback_downtime_sec": 0.5,
            "ready_after_sec": 2.75, "pid_started": 4242, "capture": "/var/lib/inferops/cutover/30000/capture.json"}
ADOPT = {"action": "adopt", "host": "gpu-01", "port": 30001, "unit": "sglang-30001.service", "time": 1764500200.0,
         "adopted": {"pid": 99, "scope": "sglang-30001-adopted.scope"}}
GAUGES = ("info", "last_cutover_timestamp_seconds", "last_downtime_seconds", "last_load_seconds", "last_result")


def parsed(record, restarts=None):
    """{metric name: [(labels, value)]} as the parser reads the figures, each family's type and help checked."""
    from prometheus_client.parser import text_string_to_metric_families
    out = {}
    for family in text_string_to_metric_families(_record.metrics(record, restarts)):
        assert family.type == ("counter" if family.name == "inferops_sglang_restarts" else "gauge")
        assert family.documentation
        out[family.name] = [(s.labels, s.value) for s in family.samples if not s.name.endswith("_created")]
    return out


@pytest.mark.parametrize("record, labels, downtime, load, result", [
    (SWITCH, {"port": "30000", "unit": "sglang-30000.service", "version": "0.5.15", "model": "/models/tiny-llama",
              "mode": "switch"}, [3.517], [3.105], "success"),
    (dict(SWITCH, action="restart"), {"port": "30000", "unit": "sglang-30000.service", "version": "0.5.15",
                                      "model": "/models/tiny-llama", "mode": "switch"}, [3.517], [3.105], "success"),
    # a rollback costs its step back plus its load; its record names no version and no model
    (ROLLBACK, {"port": "30000", "unit": "sglang-30000.service", "version": "", "model": "", "mode": "rollback"},
     [3.25], [2.75], "rolled_back"),
    # an adoption in place: no downtime, no load
    (ADOPT, {"port": "30001", "unit": "sglang-30001.service", "version": "", "model": "", "mode": "adopt"},
     [0.0], [], "success"),
], ids=["switch", "restart", "rollback", "adopt"])
def test_the_figures_are_the_record_s(record, labels, downtime, load, result):
    m = parsed(record)
    port = {"port": labels["port"]}
    assert set(m) == {"inferops_sglang_" + n for n in GAUGES}
    assert m["inferops_sglang_info"] == [(labels, 1.0)]
    assert m["inferops_sglang_last_cutover_timestamp_seconds"] == [(port, record["time"])]
    assert m["inferops_sglang_last_downtime_seconds"] == [(port, v) for v in downtime]
    assert m["inferops_sglang_last_load_seconds"] == [(port, v) for v in load]
    assert sorted(m["inferops_sglang_last_result"], key=str) == [
        (dict(port, result="rolled_back"), float(result == "rolled_back")),
        (dict(port, result="success"), float(result == "success"))]


def test_label_values_are_escaped_so_the_parser_reads_them_back_as_they_were():
    model = 'a "quoted" model\\name\nsecond line'
    assert parsed(dict(SWITCH, model=model))["inferops_sglang_info"][0][0]["model"] == model


def test_the_same_record_gives_the_same_text():
    assert _record.metrics(dict(SWITCH)) == _record.metrics(dict(SWITCH)) and _record.metrics(SWITCH).endswith("0\n")


def test_the_units_restarts_by_reason_are_a_counter():
    """The status passes sglang_discover's restarts: one series per reason, a counter the parser reads back."""
    m = parsed(SWITCH, {"total": 3, "reasons": {"watchdog": 2, "exit-code": 1}, "last": None})
    assert sorted(m["inferops_sglang_restarts"], key=str) == [
        ({"port": "30000", "reason": "exit-code"}, 1.0), ({"port": "30000", "reason": "watchdog"}, 2.0)]
    assert "inferops_sglang_restarts" not in parsed(SWITCH)
    assert "inferops_sglang_restarts_total" not in _record.metrics(SWITCH)


@pytest.mark.parametrize("record, restarts, says", [
    ([], None, "the record must be a dict (the last record), not []"),
    (dict(SWITCH, action="join"), None, "the record's action must be one of adopt, restart, rollback, switch, not 'join'"),
    (dict(SWITCH, port=0), None, "the record's port must be 1-65535, not 0"),
    (dict(SWITCH, port=True), None, "the record's port must be 1-65535, not True"),
    (dict(SWITCH, time=None), None, "the record needs its time"),
    (dict(SWITCH, load_sec="3"), None, "the record's load_sec must be a number of seconds, not '3'"),
    (SWITCH, {"reasons": {"watchdog": -1}}, "restarts must be sglang_discover's (reasons: {result: count}), not"),
    (SWITCH, {"reasons": {"watchdog": True}}, "restarts must be sglang_discover's"),
    (SWITCH, {"total": 1}, "restarts must be sglang_discover's"),
    (SWITCH, [], "restarts must be sglang_discover's"),
])
def test_a_bad_record_or_restarts_is_named(record, restarts, says):
    with pytest.raises(ValueError) as e:
        _record.metrics(record, restarts)
    assert says in str(e.value)


def _root_folder(path, mode=0o755):
    path.mkdir(parents=True, exist_ok=True)
    os.chmod(str(path), mode)
    return path


needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="the textfile's folder must be root's")


@needs_root
def test_the_textfile_is_the_ports_root_s_0644_in_a_folder_only_root_can_write(tmp_path):
    folder = _root_folder(tmp_path / "textfile")
    f = _record.textfile(str(folder) + "/", SWITCH)
    assert (f.path, f.mode, f.uid, f.gid) == (str(folder / "inferops_sglang_30000.prom"), 0o644, 0, 0)
    assert f.content == _record.metrics(SWITCH) and f.differs


def _nobody():
    import pwd
    return pwd.getpwnam("nobody").pw_uid


@needs_root
@pytest.mark.parametrize("make, given, says", [
    (None, "textfile", "must be an absolute path without . or .. parts, not \"textfile\""),
    (None, "{tmp}/a/../textfile", "must be an absolute path without . or .. parts, not \"{tmp}/a/../textfile\""),
    (None, "{tmp}/./textfile", "must be an absolute path without . or .. parts"),
    (None, "", "must be an absolute path without . or .. parts, not \"\""),
    ("missing", "{tmp}/textfile", "cannot look at {tmp}/textfile: No such file or directory"),
    ("file", "{tmp}/textfile", "it is not a folder"),
    ("group-writable", "{tmp}/textfile", "{tmp}/textfile can be written by its group"),
    ("world-writable", "{tmp}/textfile", "{tmp}/textfile can be written by its group and everyone"),
    ("nobody's", "{tmp}/textfile", "{tmp}/textfile is owned by nobody"),
    ("above writable", "{tmp}/above/textfile", "{tmp}/above/textfile is in {tmp}/above, which its group and everyone can write"),
    ("a link to nobody's", "{tmp}/textfile", "{tmp}/real is owned by nobody"),  # a link's target is checked too
])
def test_a_folder_another_user_can_change_is_refused_naming_the_rule_and_the_folder(tmp_path, make, given, says):
    tmp = _root_folder(tmp_path / "tmp")
    folder = tmp / "textfile"
    if make == "file":
        folder.write_text("")
    elif make in ("group-writable", "world-writable", "nobody's"):
        _root_folder(folder, {"group-writable": 0o775, "world-writable": 0o777}.get(make, 0o755))
        if make == "nobody's":
            os.chown(str(folder), _nobody(), -1)
    elif make == "above writable":
        _root_folder(tmp / "above", 0o777)
        _root_folder(tmp / "above" / "textfile")
    elif make == "a link to nobody's":
        os.chown(str(_root_folder(tmp / "real")), _nobody(), -1)
        os.symlink(str(tmp / "real"), str(folder))
    before = sorted(os.listdir(str(tmp)))
    with pytest.raises(ValueError) as e:
        _record.textfile(given.replace("{tmp}", str(tmp)), SWITCH)
    msg = str(e.value)
    assert says.replace("{tmp}", str(tmp)) in msg and msg.startswith("cutover_metrics_dir ")
    assert "no metrics were written" in msg
    assert sorted(os.listdir(str(tmp))) == before


@needs_root
def test_a_link_root_made_in_root_s_folders_is_followed(tmp_path):
    real = _root_folder(tmp_path / "real")
    os.symlink(str(real), str(tmp_path / "textfile"))
    assert _record.textfile(str(tmp_path / "textfile"), SWITCH).path == str(tmp_path / "textfile" / "inferops_sglang_30000.prom")


def _tree(folder):
    return dict((os.path.relpath(os.path.join(d, n), str(folder)), open(os.path.join(d, n)).read())
                for d, _dirs, names in os.walk(str(folder)) for n in names)


@needs_root
def test_keep_writes_the_record_and_its_figures_once_then_nothing(tmp_path):
    state, metrics = tmp_path / "30000", _root_folder(tmp_path / "textfile")
    keep = _record.Keep(str(state), "cutover", SWITCH, 20, str(metrics))
    prom = str(metrics / "inferops_sglang_30000.prom")
    assert keep.written == [str(state / "last.json"), str(state / "history" / "20251130T105320Z-cutover.json"),
                            str(state / "last.md"), prom]
    assert keep.write() == [] and keep.warning is None
    assert open(prom).read() == _record.metrics(SWITCH) and os.stat(prom).st_mode & 0o7777 == 0o644
    assert json.loads((state / "last.json").read_text()) == SWITCH
    assert os.listdir(str(metrics)) == ["inferops_sglang_30000.prom"]  # no temporary left
    again = _record.Keep(str(state), "cutover", SWITCH, 20, str(metrics))
    assert again.written == [] and again.removed == []


@needs_root
def test_without_a_record_the_figures_come_from_last_json_as_the_host_holds_it(tmp_path):
    """The switch kept the record: the textfile is made from last.json (and the restarts given), the record itself
    left as it is; no last.json yet (nothing cut over), no textfile."""
    state, metrics = tmp_path / "30000", _root_folder(tmp_path / "textfile")
    assert _record.Keep(str(state), "cutover", None, 20, str(metrics)).files == []
    for f in _record.files(str(state), "rollback", ROLLBACK):
        f.write()
    before = _tree(state)
    restarts = {"reasons": {"watchdog": 1}}
    keep = _record.Keep(str(state), "cutover", None, 20, str(metrics), restarts)
    assert keep.record == [] and keep.written == [str(metrics / "inferops_sglang_30000.prom")]
    keep.write()
    assert (metrics / "inferops_sglang_30000.prom").read_text() == _record.metrics(ROLLBACK, restarts)
    assert _tree(state) == before
    assert _record.Keep(str(state), "cutover", None, 20, str(metrics), restarts).written == []


@needs_root
@pytest.mark.parametrize("last, says", [
    ("{not json", "the record the figures are made from, {state}/last.json, is not JSON"),
    ('{"action": "join", "port": 30000, "time": 1}', "the record's action must be one of"),
])
def test_a_damaged_last_json_is_named_and_nothing_is_written(tmp_path, last, says):
    state, metrics = _root_folder(tmp_path / "30000", 0o700), _root_folder(tmp_path / "textfile")
    (state / "last.json").write_text(last)
    with pytest.raises(ValueError, match=re.escape(says.replace("{state}", str(state)))):
        _record.Keep(str(state), "cutover", None, 20, str(metrics))
    assert os.listdir(str(metrics)) == []


@needs_root
def test_a_bad_metrics_folder_writes_nothing_not_even_the_record(tmp_path):
    state, metrics = tmp_path / "30000", _root_folder(tmp_path / "textfile", 0o777)
    with pytest.raises(ValueError, match="can be written by its group and everyone"):
        _record.Keep(str(state), "cutover", SWITCH, 20, str(metrics))
    assert not state.exists() and os.listdir(str(metrics)) == []


@pytest.mark.parametrize("folder, history, says", [
    ("state/30000", 20, "the record's folder must be an absolute path, not 'state/30000'"),
    (None, 0, "the history keeps at least 1 record, not 0"),
    (None, True, "the history keeps at least 1 record, not True"),
])
def test_keep_refuses_a_relative_folder_or_no_history(tmp_path, folder, history, says):
    with pytest.raises(ValueError, match=re.escape(says)):
        _record.Keep(folder or str(tmp_path / "30000"), "cutover", SWITCH, history)
    assert not (tmp_path / "30000").exists()


def test_a_file_keep_cannot_write_is_named_with_why(tmp_path):
    (tmp_path / "state").write_text("a file where the folder should be\n")
    keep = _record.Keep(str(tmp_path / "state" / "30000"), "cutover", SWITCH)
    with pytest.raises(_record.WriteError, match=r"^could not write %s: .*Not a directory" % re.escape(
            str(tmp_path / "state" / "30000" / "last.json"))):
        keep.write()


def test_the_record_says_how_the_start_had_its_weights_from_the_daemon():
    wc = {"unit": "sglang-30000-weights.service", "active_state": "active", "main_pid": 700, "restarts": 0,
          "gpu_memory_mib": 15948, "mapped": True, "load_seconds": [8.36, 0.05], "first_load_seconds": 8.36}
    given = _record.switch_plan({"write": True, "data": {"host": "h"}}, "/d", {"family": [], "gpus": [0]}, "0.5.17", None)
    rec = _record.switch_record(given, {"began": 1.0, "action": "switch"}, {"ready_after": 3.0, "weight_cache": wc}, False)
    assert rec["weight_cache"] == wc
    assert ("\n- weight cache: sglang-30000-weights.service (pid 700, 0 restarts, 15948 MiB on the GPUs); this start "
            "mapped its weights from it, SGLang's weight load 0.05 s (the first in the unit's journal: 8.36 s)\n"
            ) in _record.report(rec)
    read = _record.report(dict(rec, weight_cache=dict(wc, mapped=False, gpu_memory_mib=None, load_seconds=[9.1])))
    assert "(pid 700, 0 restarts, ? MiB on the GPUs); this start did not map its weights from it, SGLang's weight " \
           "load 9.1 s" in read
    without = _record.switch_record(given, {"began": 1.0, "action": "switch"}, {"ready_after": 3.0}, False)
    assert without["weight_cache"] is None and "weight cache" not in _record.report(without)
