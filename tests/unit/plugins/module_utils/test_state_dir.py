"""The port's state folder: each path named once, in _state_dir.py, and every other file of module_utils asks it."""
import ast
import os

from ansible_collections.inferops.sglang.plugins.module_utils import _state_dir
from tests.unit.conftest import ROOT

MODULE_UTILS = ROOT / "plugins" / "module_utils"
NAMES = ("capture.json", "switch.json", "switch.lock", "units.json", "switch-plan-", "switch-runtime-", "last.json",
         "last.md")


def test_every_path_is_in_the_ports_folder():
    folder = _state_dir.folder("/var/lib/inferops/cutover", 30000)
    assert folder == "/var/lib/inferops/cutover/30000"
    paths = [_state_dir.capture(folder), _state_dir.lock(folder), _state_dir.outcome(folder),
             _state_dir.plan(folder, "1-2"), _state_dir.runtime(folder, "1-2"), _state_dir.units(folder),
             _state_dir.backup(folder, "/etc/systemd/system/x.service")] + _state_dir.records(folder, "cutover", "S")
    assert [os.path.relpath(p, folder) for p in paths] == [
        "capture.json", "switch.lock", "switch.json", "switch-plan-1-2.json", "switch-runtime-1-2.zip", "units.json",
        "units/etc/systemd/system/x.service", "last.json", "history/S-cutover.json", "last.md"]
    assert _state_dir.backup(folder, "/etc/../etc/x.service") == folder + "/units/etc/x.service"


def test_the_leftovers_are_earlier_switches_plans_and_payloads_only(tmp_path):
    for name in ("switch-plan-a.json", "switch-runtime-a.zip", "switch.json", "switch.lock", "capture.json",
                 "units.json", "last.json", ".switch-runtime-x.tmp"):
        (tmp_path / name).write_text("")
    assert _state_dir.leftovers(str(tmp_path)) == [str(tmp_path / "switch-plan-a.json"),
                                                   str(tmp_path / "switch-runtime-a.zip")]
    assert _state_dir.leftovers(str(tmp_path / "none")) == []


def strings(path):
    """The string constants of a file's code (its docstrings left out)."""
    tree = ast.parse(path.read_text())
    docs = set(id(n.body[0].value) for n in ast.walk(tree) if isinstance(
        n, (ast.Module, ast.ClassDef, ast.FunctionDef)) and n.body and isinstance(n.body[0], ast.Expr))
    return [n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)
            and id(n) not in docs]


def test_no_other_file_names_a_path_of_the_ports_folder():
    others = [p for p in MODULE_UTILS.rglob("*.py") if p.name != "_state_dir.py"]
    assert len(others) > 30
    named = [(str(p.relative_to(MODULE_UTILS)), s) for p in others for s in strings(p) if any(n in s for n in NAMES)]
    assert named == []
