"""Every module has its cases (test_MODULE.py and test_MODULE.yaml), and they test its spec: a required option
left out (where it has one, or one of a required pair: required_one_of), a choice or a type refused, and check
mode."""
import importlib

import pytest
import yaml

from tests.unit.conftest import ROOT

from .uthelper import load

HERE = ROOT / "tests" / "unit" / "plugins" / "modules"
MODULES = sorted(p.stem for p in (ROOT / "plugins" / "modules").glob("*.py") if p.name != "__init__.py")


def requires(module):
    """Whether the module has a required option, or a pair of which one is required."""
    code = importlib.import_module("ansible_collections.inferops.sglang.plugins.modules." + module)
    options = yaml.safe_load(code.DOCUMENTATION)["options"]
    return "required_one_of" in (ROOT / "plugins" / "modules" / (module + ".py")).read_text() or any(
        o.get("required") for o in options.values())


def said(case):
    return " ".join(str(v) for v in list((case.get("output") or {}).values()) + list((case.get("contains") or {}).values()))


@pytest.mark.parametrize("module", MODULES)
def test_the_modules_cases_test_its_spec_and_check_mode(module):
    assert (HERE / ("test_%s.py" % module)).exists()
    cases = load(str(HERE / ("test_%s.py" % module)))
    failed = [said(c) for c in cases if c.get("failed")]
    assert [c for c in cases if (c.get("flags") or {}).get("check")], "no case in check mode"
    assert [s for s in failed if "required" in s] or not requires(module), "no case leaves out a required option"
    assert [s for s in failed if "must be one of" in s or "is of type" in s or "Unsupported" in s], \
        "no case gives a value the spec refuses"
    assert len(cases) >= 4
