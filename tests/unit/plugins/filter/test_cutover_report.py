"""What the cutover role says (plugins/filter/cutover_report.py): the plan from the switch's checks, the throughput
gate's table, and the record stage's summary for each way a run ends (a record kept by the record stage or by the
switch, nothing to switch, check mode, an adoption); and the one mapping the report stage's filter gives of them."""
import pytest

from ansible_collections.inferops.sglang.plugins.filter.cutover_report import (
    bench_gate, cutover_report, plan_lines, summary)


def test_the_plan_names_the_gpus_the_protected_the_strays_and_each_unit():
    preflight = {"gpus": [0, 1], "protected": [{"cmdline": "nvidia-persistenced"}],
                 "strays": [{"cmdline": "python train.py"}]}
    checks = {"msg": "would switch port 30000", "preflight": preflight,
              "units": [{"plan": "old.service: disabled, stopped", "changed": ["ExecStart"]}, {"plan": "b.service: kept"}]}
    assert plan_lines(checks, True) == [
        "would switch port 30000", "GPUs of the server: [0, 1]", "protected, never touched: ['nvidia-persistenced']",
        "strays (released: True): ['python train.py']",
        "other units that could serve the port, and what the switch does to each: ",
        "old.service: disabled, stopped", "b.service: kept", "what changes in it: ExecStart"]
    assert plan_lines({"msg": "m", "preflight": {}})[-1].endswith("to each: none")


def test_the_gate_compares_each_concurrency_and_names_the_slower():
    gate = bench_gate({"1": {"output_throughput": 100.0}, "10": {"output_throughput": 800.0}},
                      {"1": {"output_throughput": 95.0}, "10": {"output_throughput": 600.0}}, 10)
    assert gate["table"] == [{"concurrency": 1, "baseline": 100.0, "service": 95.0, "change_pct": -5.0},
                             {"concurrency": 10, "baseline": 800.0, "service": 600.0, "change_pct": -25.0}]
    assert [r["concurrency"] for r in gate["slower"]] == [10]
    assert gate["says"] == ("the service is slower than the old server at concurrency [10] (output tok/s, baseline -> "
                            "service): C=1 100.0 -> 95.0 (-5.0 %); C=10 800.0 -> 600.0 (-25.0 %); allowed -10 %")
    assert bench_gate({"1": {"output_throughput": 10.0}}, {"1": {"output_throughput": 9.5}}, 10)["slower"] == []


def test_the_summary_for_each_way_a_run_ends():
    switched = {"plan": ["the plan"], "report": "# Cutover\nready after 5 s", "says": "unused"}
    assert summary(switched) == ["the plan", "# Cutover", "ready after 5 s"]
    assert summary(switched, "# Cutover\nwith the gate") == ["the plan", "# Cutover", "with the gate"]
    assert summary({"plan": [], "report": None, "says": "sglang.service serves port 1: nothing to switch"}) == [
        "sglang.service serves port 1: nothing to switch"]
    assert summary({"plan": [], "report": None, "says": "check mode: nothing was changed. adopted"}, None) == [
        "check mode: nothing was changed. adopted"]


CHECKS = {"msg": "would switch port 30000", "preflight": {"gpus": [0]}, "units": []}
BASELINE, SERVICE = {"1": {"output_throughput": 100.0}}, {"1": {"output_throughput": 80.0}}
DONE = {"plan": ["the plan"], "report": "# Cutover\nready after 5 s", "says": "unused"}


@pytest.mark.parametrize("given, options, keys", [
    ({}, {}, {}),
    ({"checks": CHECKS}, {"release_strays": True}, {"plan": lambda: plan_lines(CHECKS, True)}),
    ({"baseline": BASELINE, "service": SERVICE}, {"max_slowdown_pct": 10},
     {"gate": lambda: bench_gate(BASELINE, SERVICE, 10)}),
    ({"done": DONE, "recorded": "# Cutover\nwith the gate"}, {}, {"summary": lambda: summary(DONE, "# Cutover\nwith the gate")}),
    ({"done": DONE}, {}, {"summary": lambda: summary(DONE)}),
    ({"checks": CHECKS, "baseline": BASELINE, "service": SERVICE, "done": DONE}, {},
     {"plan": lambda: plan_lines(CHECKS), "gate": lambda: bench_gate(BASELINE, SERVICE, 0), "summary": lambda: summary(DONE)}),
])
def test_the_report_stage_is_one_mapping_with_a_key_for_each_part_given(given, options, keys):
    assert cutover_report(given, **options) == dict((k, f()) for k, f in keys.items())
