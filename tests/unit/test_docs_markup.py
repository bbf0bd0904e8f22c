"""The docs as users read them: ansible-doc's rendering of every module, filter and role entry point, and the
role READMEs, hold no markup left raw (M(), V(), O(), RV() ... shown as typed)."""
import json
import os
import re
import subprocess
import sys

import pytest
import yaml

from tests.tools.role_readme import roles
from tests.unit.conftest import COLLECTIONS, ROOT

RAW = re.compile(r"\b(?:RV|[MVOCIEPUL])\([^)]*\)?")
DOC = os.path.join(os.path.dirname(sys.executable), "ansible-doc")
ENV = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=COLLECTIONS, ANSIBLE_COLLECTIONS_SCAN_SYS_PATH="false",
           ANSIBLE_NOCOLOR="1")


def names(folder, ext):
    return sorted("inferops.sglang." + f[:-len(ext)] for f in os.listdir(str(ROOT / "plugins" / folder))
                  if f.endswith(ext) and not f.startswith("_"))


def rendered(kind, plugins):
    r = subprocess.run([DOC, "-t", kind] + plugins, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       universal_newlines=True, env=ENV, check=False)
    assert r.returncode == 0, r.stdout[-2000:]
    return r.stdout


@pytest.mark.parametrize("kind,plugins", [("module", names("modules", ".py")), ("filter", names("filter", ".yml")),
                                          ("role", ["inferops.sglang." + r.name for r in roles()])],
                         ids=["modules", "filters", "roles"])
def test_ansible_doc_shows_no_raw_markup(kind, plugins):
    assert len(plugins) >= 5
    text = rendered(kind, plugins)
    for name in plugins:
        assert name in text
    assert RAW.findall(text) == []


def test_every_role_entry_point_has_its_own_description():
    for role in roles():
        specs = yaml.safe_load((role / "meta" / "argument_specs.yml").read_text())["argument_specs"]
        texts = [json.dumps([s["short_description"], s.get("description")]) for s in specs.values()]
        assert len(set(texts)) == len(texts), role.name
    entry_points = [t for t in os.listdir(str(ROOT / "roles" / "systemd_unit" / "tasks")) if t.endswith(".yml")]
    specs = yaml.safe_load((ROOT / "roles" / "systemd_unit" / "meta" / "argument_specs.yml").read_text())
    assert set(specs["argument_specs"]) == set(t[:-4] for t in entry_points)


@pytest.mark.parametrize("role", roles(), ids=[r.name for r in roles()])
def test_role_readme_shows_no_raw_markup(role):
    assert RAW.findall((role / "README.md").read_text()) == []


def test_the_check_finds_raw_markup():
    assert RAW.findall("see M(inferops.sglang.bench), V(), O(port) and RV(stored)") == [
        "M(inferops.sglang.bench)", "V()", "O(port)", "RV(stored)"]


def test_module_references_name_modules_and_role_references_roles():
    """M() is for modules; a role is P(FQCN#role) (R() links a heading of the Ansible docsite)."""
    modules = set(names("modules", ".py"))
    role_names = set("inferops.sglang." + r.name for r in roles())
    docs = list((ROOT / "plugins").rglob("*.py")) + list((ROOT / "plugins").rglob("*.yml")) + \
        [r / "meta" / "argument_specs.yml" for r in roles()]
    text = "\n".join(d.read_text() for d in docs)
    assert set(re.findall(r"\bM\((inferops\.sglang\.\w+)\)", text)) <= modules
    referenced = set(re.findall(r"\bP\((inferops\.sglang\.\w+)#role\)", text))
    assert referenced and referenced <= role_names
