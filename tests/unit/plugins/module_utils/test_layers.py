"""Layers only point down: a module's manager imports mechanisms, never another module's manager, so that editing
one module's manager cannot change another module."""
import ast

from tests.unit.conftest import ROOT

MODULE_UTILS = ROOT / "plugins" / "module_utils"


def imported(path):
    """The module_utils names a file imports (from ... import X and from ...X import Y)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and "module_utils" in node.module:
            last = node.module.rsplit(".", 1)[-1]
            names.update([a.name for a in node.names] if last == "module_utils" else [last])
    return names


def test_no_manager_imports_another_manager():
    managers = sorted(MODULE_UTILS.glob("_manager_*.py"))
    assert len(managers) >= 8
    crossing = dict((m.name, sorted(n for n in imported(m) if n.startswith("_manager_"))) for m in managers)
    assert not [m for m, n in crossing.items() if n], crossing


def test_mechanisms_import_no_manager():
    mechanisms = [p for p in MODULE_UTILS.glob("_*.py") if not p.name.startswith("_manager_")]
    crossing = dict((m.name, sorted(n for n in imported(m) if n.startswith("_manager_"))) for m in mechanisms)
    assert not [m for m, n in crossing.items() if n], crossing
