"""The port's figures for node_exporter's textfile collector, read back with prometheus_client's text-format parser
(as Prometheus reads them) and checked against the record they came from."""
import pytest
from prometheus_client.parser import text_string_to_metric_families

from ansible.errors import AnsibleFilterError
from ansible_collections.inferops.sglang.plugins.filter.metrics import cutover_metrics

# A switch's record as last.json holds it (the fields the figures read; the rest as sglang_switch writes them).
SWITCH = {"action": "switch", "host": "gpu-01", "port": 30000, "unit": "sglang-30000.service", "time": 1764500000.5,
          "sglang_version": "0.5.15", "model": "/models/tiny-llama", "downtime_switch_sec": 0.412, "load_sec": 3.105,
          "downtime_until_ready_sec": 3.517, "generated": True, "stages_sec": {"discover": 0.2, "switch": 0.6}}
ROLLBACK = {"action": "rollback", "host": "gpu-01", "port": 30000, "unit": "sglang-30000.service",
            "time": 1764500100.25, "failure": "rolled back on purpose", "rollback_downtime_sec": 0.5,
            "ready_after_sec": 2.75, "pid_started": 4242, "capture": "/var/lib/inferops/cutover/30000/capture.json"}
ADOPT = {"action": "adopt", "host": "gpu-01", "port": 30001, "unit": "sglang-30001.service", "time": 1764500200.0,
         "adopted": {"pid": 99, "scope": "sglang-30001-adopted.scope"}}


def parsed(record):
    """{metric name: [(labels, value)]} as the parser reads the filter's output."""
    out = {}
    for family in text_string_to_metric_families(cutover_metrics(record)):
        assert family.type == "gauge" and family.documentation
        out[family.name] = [(s.labels, s.value) for s in family.samples]
    return out


def test_a_switch_s_figures_are_its_record_s():
    m = parsed(SWITCH)
    assert m["inferops_sglang_info"] == [({"port": "30000", "unit": "sglang-30000.service", "version": "0.5.15",
                                          "model": "/models/tiny-llama", "mode": "switch"}, 1.0)]
    assert m["inferops_sglang_last_cutover_timestamp_seconds"] == [({"port": "30000"}, SWITCH["time"])]
    assert m["inferops_sglang_last_downtime_seconds"] == [({"port": "30000"}, SWITCH["downtime_until_ready_sec"])]
    assert m["inferops_sglang_last_load_seconds"] == [({"port": "30000"}, SWITCH["load_sec"])]
    assert sorted(m["inferops_sglang_last_result"], key=str) == [
        ({"port": "30000", "result": "rolled_back"}, 0.0), ({"port": "30000", "result": "success"}, 1.0)]
    names = ("info", "last_cutover_timestamp_seconds", "last_downtime_seconds", "last_load_seconds", "last_result")
    assert set(m) == {"inferops_sglang_" + n for n in names}


def test_a_restart_is_mode_switch():
    assert parsed(dict(SWITCH, action="restart"))["inferops_sglang_info"][0][0]["mode"] == "switch"


def test_a_rollback_says_rolled_back_and_costs_its_step_back_plus_its_load():
    m = parsed(ROLLBACK)
    labels = m["inferops_sglang_info"][0][0]
    assert (labels["mode"], labels["version"], labels["model"]) == ("rollback", "", "")
    assert dict((s[0]["result"], s[1]) for s in m["inferops_sglang_last_result"]) == {"success": 0.0, "rolled_back": 1.0}
    assert m["inferops_sglang_last_downtime_seconds"] == [({"port": "30000"}, 3.25)]
    assert m["inferops_sglang_last_load_seconds"] == [({"port": "30000"}, 2.75)]
    assert m["inferops_sglang_last_cutover_timestamp_seconds"][0][1] == ROLLBACK["time"]


def test_an_adoption_had_no_downtime_and_no_load():
    m = parsed(ADOPT)
    assert m["inferops_sglang_info"][0][0]["mode"] == "adopt"
    assert m["inferops_sglang_last_downtime_seconds"] == [({"port": "30001"}, 0.0)]
    assert m["inferops_sglang_last_load_seconds"] == []


def test_label_values_are_escaped_so_the_parser_reads_them_back_as_they_were():
    model = 'a "quoted" model\\name\nsecond line'
    assert parsed(dict(SWITCH, model=model))["inferops_sglang_info"][0][0]["model"] == model


def test_the_same_record_gives_the_same_text():
    assert cutover_metrics(dict(SWITCH)) == cutover_metrics(dict(SWITCH)) and cutover_metrics(SWITCH).endswith("0\n")


@pytest.mark.parametrize("record,says", [
    ([], "must be a dict"),
    (dict(SWITCH, action="join"), "action must be one of adopt, restart, rollback, switch, not 'join'"),
    (dict(SWITCH, port=0), "port must be 1-65535, not 0"),
    (dict(SWITCH, port=True), "port must be 1-65535, not True"),
    (dict(SWITCH, time=None), "needs its time"),
    (dict(SWITCH, load_sec="3"), "load_sec must be a number of seconds, not '3'"),
])
def test_a_bad_record_is_named(record, says):
    with pytest.raises(AnsibleFilterError) as e:
        cutover_metrics(record)
    assert says in str(e.value)


def test_the_units_restarts_by_reason_are_a_counter():
    """The status passes sglang_discover's restarts: one series per reason, a counter the parser reads back."""
    text = cutover_metrics(SWITCH, {"total": 3, "reasons": {"watchdog": 2, "exit-code": 1}, "last": None})
    families = {f.name: f for f in text_string_to_metric_families(text)}
    restarts = families["inferops_sglang_restarts"]
    assert restarts.type == "counter" and restarts.documentation
    assert sorted((s.labels["reason"], s.value) for s in restarts.samples if s.name.endswith("_total")) == [
        ("exit-code", 1.0), ("watchdog", 2.0)]
    assert all(s.labels["port"] == "30000" for s in restarts.samples)
    assert "restarts" not in {f.name for f in text_string_to_metric_families(cutover_metrics(SWITCH))}
    assert "inferops_sglang_restarts_total" not in cutover_metrics(SWITCH)


@pytest.mark.parametrize("restarts", [{"reasons": {"watchdog": -1}}, {"reasons": {"watchdog": True}}, {"total": 1}, []])
def test_restarts_that_are_not_discoverys_are_named(restarts):
    with pytest.raises(AnsibleFilterError, match="restarts must be sglang_discover's"):
        cutover_metrics(SWITCH, restarts)
