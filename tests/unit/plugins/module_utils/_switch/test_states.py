"""One vocabulary for the switch: its actions, targets, outcome states, the adoption's actions and the record's kinds
are written once, in _switch/states.py; the Python of the switch names them from there, and the modules document them
as they are."""
import ast

import pytest
import yaml

from ansible_collections.inferops.sglang.plugins.module_utils._switch import outcome as _switch_outcome, states
from ansible_collections.inferops.sglang.plugins.modules import cutover_record, sglang_adopt, sglang_switch
from tests.unit.conftest import ROOT

PLUGINS = ROOT / "plugins"
SWITCH_PYTHON = sorted(p for p in (PLUGINS / "module_utils" / "_switch").glob("*.py") if p.name != "states.py") + [
    PLUGINS / "module_utils" / name for name in (
        "_manager_sglang_switch.py", "_manager_sglang_adopt.py", "_manager_cutover_record.py")] + [
    PLUGINS / "modules" / name for name in ("sglang_switch.py", "sglang_adopt.py", "cutover_record.py")]


def words():
    """Every name of the vocabulary (the class attributes of states.py's classes)."""
    found = set()
    for cls in (states.Actions, states.Targets, states.OutcomeStates, states.AdoptActions, states.Kinds,
                states.Owners):
        found.update(v for k, v in vars(cls).items() if k.isupper())
    return found


def values(node):
    """The constants node stands for: itself, each branch of a conditional, each element of a tuple, list or set."""
    if isinstance(node, ast.IfExp):
        return values(node.body) + values(node.orelse)
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return [c for e in node.elts for c in values(e)]
    return [node] if isinstance(node, ast.Constant) and isinstance(node.value, str) else []


def systemds(node):
    """Whether node reads a systemd unit's ActiveState (its words - failed, active - are systemd's, not the
    switch's)."""
    return any(isinstance(n, ast.Constant) and n.value == "ActiveState" for n in ast.walk(node))


# calls whose first argument is the name of a field or of a step, not a value of the vocabulary
NAMING = ("get", "pop", "setdefault", "step", "phase")


def bare(path):
    """(line, word) of each string of the vocabulary the code of path writes as a value: compared, assigned, passed,
    returned or stored in a dict. Not counted: a dict's keys and a subscript's (the fields of a result or of a file),
    the names of fields and steps (the first argument of get, pop, setdefault, step, phase), the words of a systemctl
    command line and of a unit's ActiveState, and words in prose (docstrings, the modules' documentation, a message)."""
    tree = ast.parse(path.read_text())
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare) and not systemds(node.left):
            found += values(node.left) + [c for x in node.comparators for c in values(x)]
        elif isinstance(node, ast.keyword):
            found += values(node.value)
        elif isinstance(node, (ast.Assign, ast.AugAssign, ast.Return)) and node.value is not None:
            first = node.value.elts[0] if isinstance(node, ast.Return) and isinstance(node.value, ast.Tuple) \
                else node.value
            found += values(first) if not isinstance(first, (ast.Tuple, ast.List, ast.Set)) else []
        elif isinstance(node, ast.Dict):
            found += [c for v in node.values for c in values(v) if not isinstance(v, (ast.Tuple, ast.List, ast.Set))]
        elif isinstance(node, ast.Call):
            named = isinstance(node.func, ast.Attribute) and node.func.attr in NAMING
            args = node.args[1:] if named else node.args
            found += [c for a in args if not (isinstance(a, ast.List) and a.elts and getattr(
                a.elts[0], "value", None) == "systemctl") for c in values(a)]
    vocabulary = words()
    return sorted(set((c.lineno, c.value) for c in found if c.value in vocabulary))


@pytest.mark.parametrize("path", SWITCH_PYTHON, ids=lambda p: str(p.relative_to(PLUGINS)))
def test_no_bare_action_or_state_string_remains_in_the_switchs_python(path):
    assert bare(path) == []


def test_the_check_finds_a_bare_action(tmp_path):
    code = tmp_path / "x.py"
    code.write_text('def f(p, a):\n    """switch"""\n    if p["action"] == "restart":\n'
                    '        return ["systemctl", "start", a], p.get("rollback"), dict(join=1), {"none": 0}\n'
                    '    return "join"\n')
    assert bare(code) == [(3, "restart"), (5, "join")]


def returned_choices(module, key):
    return yaml.safe_load(module.RETURN)[key]["choices"]


def test_the_modules_document_the_actions_they_return():
    assert returned_choices(sglang_switch, "action") == list(states.ACTIONS)
    assert returned_choices(sglang_adopt, "action") == list(states.ADOPT_ACTIONS)
    switch_options = yaml.safe_load(sglang_switch.DOCUMENTATION)["options"]
    assert switch_options["target"]["choices"] == [states.Targets.UNIT, states.Targets.CAPTURE]
    assert yaml.safe_load(cutover_record.DOCUMENTATION)["options"]["kind"]["choices"] == list(states.KINDS)


@pytest.mark.parametrize("outcome, state", [
    (None, None),
    ({"id": "a", "pid": None, "finished": False, "error": None}, states.OutcomeStates.CLAIMED),
    ({"id": "a", "pid": 42, "finished": False, "error": None}, states.OutcomeStates.RUNNING),
    ({"id": "a", "pid": 42, "finished": True, "error": None}, states.OutcomeStates.FINISHED),
    ({"id": "a", "pid": 42, "finished": True, "error": "systemctl start failed"}, states.OutcomeStates.FAILED),
    ({"id": "a", "pid": 42, "finished": False, "error": "the switch process 42 ended"}, states.OutcomeStates.FAILED),
])
def test_an_outcome_files_state_is_what_its_fields_say(outcome, state):
    assert _switch_outcome.state(outcome) == state
