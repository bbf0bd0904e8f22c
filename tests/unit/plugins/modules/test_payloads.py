"""Every module's payload, built by Ansible's own AnsiballZ builder, holds what the module imports and nothing more,
and runs from the zip alone: no site-packages, no PYTHONPATH, none of this tree."""
import base64
import io
import json
import re
import subprocess
import sys
import textwrap
import zipfile

import pytest

from tests.unit.conftest import COLLECTIONS, ROOT
from tests.unit.plugins.module_utils._switch.test_launch import PACKAGE, payload_of

MODULES = sorted(p.stem for p in (ROOT / "plugins" / "modules").glob("*.py") if p.name != "__init__.py")

# what the controller does for a task: the collection found through Ansible's own loader, the module's wrapper
# built with its arguments (an option no module has: each module stops at its arguments' check, having touched
# nothing)
BUILD = textwrap.dedent("""\
    import os, sys
    from ansible.utils.collection_loader._collection_finder import _AnsibleCollectionFinder
    _AnsibleCollectionFinder(paths=[sys.argv[1]])._install()
    from ansible.executor import module_common
    from ansible.parsing.dataloader import DataLoader
    from ansible.template import Templar
    for name in sys.argv[3:]:
        built = module_common.modify_module(
            module_name="inferops.sglang." + name, module_args={"not_an_option_of_any_module": 1},
            module_path=os.path.join(sys.argv[1], "ansible_collections/inferops/sglang/plugins/modules", name + ".py"),
            templar=Templar(loader=DataLoader()), task_vars={"ansible_python_interpreter": sys.executable})
        with open(os.path.join(sys.argv[2], name + ".py"), "wb") as f:
            f.write(built.b_module_data)
    """)


@pytest.fixture(scope="module")
def wrappers(tmp_path_factory):
    where = tmp_path_factory.mktemp("ansiballz")
    subprocess.run([sys.executable, "-c", BUILD, COLLECTIONS, str(where)] + MODULES, check=True, timeout=120)
    return where


def zipped(wrapper):
    """The module_utils of the collection in the payload of a wrapper, as paths under module_utils."""
    data = re.search(r"(?:zip_data=|ZIPDATA = )r?['\"]{1,3}([A-Za-z0-9+/=]+)", wrapper.read_text()).group(1)
    names = zipfile.ZipFile(io.BytesIO(base64.b64decode(data))).namelist()
    return set(n[len(PACKAGE) + 1:] for n in names if n.startswith(PACKAGE + "/") and n.endswith(".py"))


def test_every_module_is_built():
    assert len(MODULES) >= 10 and "sglang_switch" in MODULES


@pytest.mark.parametrize("module", MODULES)
def test_the_payload_holds_what_the_module_imports_and_nothing_more(wrappers, module):
    packed = zipped(wrappers / (module + ".py"))
    assert packed - {"__init__.py"} == payload_of(module)  # module_utils' own __init__.py, which Ansible writes
    managers = [n for n in packed if n.startswith("_manager_")]
    assert managers == ["_manager_%s.py" % module]  # its own manager, no other


@pytest.mark.parametrize("module", MODULES)
def test_the_module_runs_from_its_payload_alone(wrappers, module, tmp_path):
    """Isolated (-I) and without site (-S): only the standard library and the zip; its every import at the top
    of its files runs, then AnsibleModule refuses the unknown option."""
    run = subprocess.run([sys.executable, "-I", "-S", str(wrappers / (module + ".py"))], cwd=str(tmp_path),
                         env={"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, universal_newlines=True, timeout=60, check=False)
    out = json.loads(run.stdout)
    assert run.returncode == 1 and out["failed"], (run.stdout, run.stderr)
    assert "not_an_option_of_any_module" in out.get("msg", "") or "required" in out.get("msg", ""), out
    assert "Error" not in run.stderr and "Traceback" not in run.stdout + run.stderr
