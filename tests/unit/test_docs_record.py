"""docs/record.md documents exactly the fields the record's writers can produce, for each kind of record: the
controller's part (roles/cutover/tasks: prepare.yml, adopt/main.yml, rollback.yml) and the switch's
(module_utils/_switch/record.py). molecule/cutover checks the reference against the records a run wrote."""
import json
import re

import pytest
import yaml

from ansible_collections.inferops.sglang.plugins.filter.cutover_multinode import group_record
from ansible_collections.inferops.sglang.plugins.module_utils._switch import record as _record
from tests.tools.record_fields import ROOT, documented, undocumented

TASKS = ROOT / "roles" / "cutover" / "tasks"


def _task(path, name):
    return next(t for t in yaml.safe_load((TASKS / path).read_text()) if t["name"] == name)


def controller_data():
    """What the controller gives the switch as the record's start (_cutover_record_data)."""
    task = _task("prepare.yml", "Prepare - what changed under the server, and what the record starts from")
    return task["ansible.builtin.set_fact"]["_cutover_record_data"]


def switch(back, data):
    """A record as the switch completes it, from a plan with a unit installed and a wait that verified."""
    insp = {"family": [{"pid": 10}, {"pid": 11}], "gpus": [0]}
    installed = {"seconds": 0.2, "unit_path": "/etc/systemd/system/u.service", "checksum": "ab", "environment_names": []}
    given = _record.switch_plan({"write": True, "data": data}, "/d", insp, "0.5.15", installed, [{"unit": "x.service"}])
    outcome = {"began": 1.0, "action": "switch", "units_restored": [], "unit_started": None}
    result = {"steps": [], "downtime": 0.3, "ready_after": 3.0, "elapsed": 1.0, "wait_seconds": 3.1, "model": "m",
              "generated": True, "pid_started": 12}
    return _record.switch_record(given, outcome, result, back)


def adoption_keys():
    """The fields adopt/main.yml's record adds to the controller's ({'name': ...} in its combine), and those of
    its `adopted`."""
    text = _task("adopt/main.yml", "Adopt in place - what the record stage keeps and says")[
        "ansible.builtin.set_fact"]["_cutover_done"]["record"]
    adopted = re.search(r"'adopted': \{([^{}]*)\}", text).group(1)
    outer = re.sub(r"\{[^{}]*\}", "", text[text.index("combine({") + len("combine({"):])  # the inner maps out
    return set(re.findall(r"'(\w+)':", outer)), set(re.findall(r"'(\w+)':", adopted))


def top(fields):
    return set(f for f in fields if "." not in f and "[]" not in f)


def under(fields, parent):
    return set(f[len(parent):] for f in fields if f.startswith(parent) and "." not in f[len(parent):]
               and "[]" not in f[len(parent):])


def test_the_reference_has_a_table_for_each_kind_of_record():
    assert sorted(documented()) == ["adopt", "cutover", "rollback"]


def group_keys():
    """The fields a multi-node server's group adds to each rank's record (group/switch.yml), and those of a rank."""
    rec = group_record([{"msg": "m", "outcome": {"seconds": 1.0, "stop_began_at": 1.0}}],
                       [{"host": "a", "rank": {"node_rank": 0}}], "kimi", 0)
    block = [t for t in yaml.safe_load((TASKS / "group" / "switch.yml").read_text()) if "block" in t][-1]["block"]
    task = next(t for t in block if "inferops.sglang.sglang_switch" in t)
    assert "combine({'group': _cutover_group_stopped.record," in task["inferops.sglang.sglang_switch"]["record"]["data"]
    return set(rec), set(rec["ranks"][0])


def test_a_cutover_s_fields_are_the_controller_s_and_the_switch_s():
    doc, rec = documented()["cutover"], switch(False, controller_data())
    group, rank = group_keys()
    assert top(doc) == set(rec) | {"group"}
    assert under(doc, "group.") == group and under(doc, "group.ranks[].") == rank
    assert under(doc, "old.") == set(controller_data()["old"]) | {"family"}
    assert under(doc, "stages_sec.") == set(controller_data()["stages_sec"]) | set(rec["stages_sec"])
    assert under(doc, "units[].") == set(_record.UNIT_KEYS)


def test_a_rollback_s_fields_are_rollback_yml_s_and_the_switch_s():
    task = _task("rollback.yml", "Rollback - stop the unit, start what served before (on the host), record")
    assert top(documented()["rollback"]) == set(switch(True, task["inferops.sglang.sglang_switch"]["record"]["data"]))


def test_an_adoption_s_fields_are_the_controller_s_and_the_adopt_mode_s():
    doc = documented()["adopt"]
    added, adopted = adoption_keys()
    assert top(doc) == set(controller_data()) | added
    assert under(doc, "adopted.") == adopted
    assert under(doc, "old.") == set(controller_data()["old"]) | {"family"}


def test_a_field_left_out_of_the_reference_fails_the_checks():
    text = (ROOT / "docs" / "record.md").read_text()
    rows = [line for line in text.splitlines() if line.startswith("| `load_sec` |")]
    assert len(rows) == 1
    doc = documented(text.replace(rows[0] + "\n", ""))["cutover"]
    assert "load_sec" in set(switch(False, controller_data())) - top(doc)
    assert undocumented({"load_sec": 3.1, "old": {"pid": 1}}, doc) == ["load_sec"]


@pytest.mark.parametrize("record,fields,left", [
    ({"a": 1, "old": {"pid": 1, "family": [1]}}, ["a", "old", "old.pid"], ["old.family"]),
    ({"patches": {"fix-a": "applied"}}, ["patches"], []),
    ({"steps": [{"step": "s", "seconds": 1}]}, ["steps", "steps[].step"], ["steps[].seconds"]),
])
def test_undocumented_takes_a_map_whole_until_one_of_its_fields_is_documented(record, fields, left):
    assert undocumented(record, fields) == left


def _blocks(kind):
    return re.findall(r"```%s\n(.*?)```" % kind, (ROOT / "docs" / "record.md").read_text(), re.S)


def test_the_example_is_a_whole_record_and_its_figures_are_the_writer_s():
    (text,) = _blocks("json")
    example, fields = json.loads(text), documented()["cutover"]
    assert undocumented(example, fields) == []
    assert sorted(top(fields) - set(example)) == ["group"]  # a rank of a multi-node server's alone
    assert example["steps"] and example["model_cache"]["warm"]  # a switch that stopped a server and warmed its model
    assert _blocks("text") == [_record.metrics(example)]
