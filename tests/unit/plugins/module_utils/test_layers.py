"""Layers only point down: a module imports its manager, a manager imports mechanisms, never another module's
manager, so that editing one module's manager cannot change another module; and the mechanisms' rooms point down
too: _host (the host) below _server (the server on it) below _switch (the switch of that server)."""
import ast

from tests.unit.conftest import ROOT

MODULE_UTILS = ROOT / "plugins" / "module_utils"
MODULES = ROOT / "plugins" / "modules"
ROOMS = ("_host", "_server", "_switch")  # lowest first
SHARED = ("_state_dir", "_specs")
OURS = "ansible_collections.inferops.sglang.plugins.module_utils"  # the state folder's paths and the options' specs: any layer names them


def imported(path):
    """The module_utils files a file imports, as their paths under module_utils without .py: _base,
    _host.procfs (from ..._host import procfs, or from ..._host.procfs import X)."""
    rooms = set(p.name for p in MODULE_UTILS.iterdir() if (p / "__init__.py").exists())
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(OURS):
            rest = node.module[len(OURS):].lstrip(".")
            if not rest:
                names.update(a.name for a in node.names)
            elif rest in rooms:
                names.update(rest + "." + a.name for a in node.names)
            else:
                names.add(rest)
    return names


def name_of(path):
    return ".".join(path.relative_to(MODULE_UTILS).with_suffix("").parts)


def mechanisms():
    return [p for p in sorted(MODULE_UTILS.rglob("*.py")) if not p.name.startswith("_manager_")]


def test_imported_reads_both_forms_of_import(tmp_path):
    code = tmp_path / "x.py"
    code.write_text("from ansible_collections.inferops.sglang.plugins.module_utils import _state_dir\n"
                    "from ansible_collections.inferops.sglang.plugins.module_utils._host import procfs as _p\n"
                    "from ansible_collections.inferops.sglang.plugins.module_utils._switch.states import Actions\n"
                    "from ansible.module_utils.basic import AnsibleModule\n")
    assert imported(code) == {"_state_dir", "_host.procfs", "_switch.states"}


def test_every_room_is_a_package_and_every_mechanism_lives_in_one():
    assert all((MODULE_UTILS / room / "__init__.py").exists() for room in ROOMS)
    loose = [p.name for p in MODULE_UTILS.glob("*.py") if not p.name.startswith("_manager_")]
    assert sorted(loose) == sorted(["_base.py"] + [s + ".py" for s in SHARED])


def test_one_manager_a_module_and_a_module_imports_its_own():
    modules = sorted(p.stem for p in MODULES.glob("*.py") if p.name != "__init__.py")
    managers = sorted(p.stem[len("_manager_"):] for p in MODULE_UTILS.glob("_manager_*.py"))
    assert len(modules) >= 10 and managers == modules
    wrong = dict((m, sorted(n for n in imported(MODULES / (m + ".py")) if n.startswith("_manager_")))
                 for m in modules)
    assert dict((m, n) for m, n in wrong.items() if n != ["_manager_" + m]) == {}


def test_no_manager_imports_another_manager():
    managers = sorted(MODULE_UTILS.glob("_manager_*.py"))
    assert len(managers) >= 10
    crossing = dict((m.name, sorted(n for n in imported(m) if n.startswith("_manager_"))) for m in managers)
    assert not [m for m, n in crossing.items() if n], crossing


def test_mechanisms_import_no_manager_nor_the_managers_base():
    found = mechanisms()
    assert len(found) >= 35 and any(p.parent.name == "_switch" for p in found)
    crossing = dict((name_of(m), sorted(n for n in imported(m) if n.startswith("_manager_") or n == "_base"))
                    for m in found)
    assert not [m for m, n in crossing.items() if n], crossing


def shared_below(room):
    """The shared files a file of room may import: those that import nothing of room or a higher room (_specs
    imports _host for its defaults, so no _host file imports _specs: that arrow would run back up)."""
    below = ROOMS[:ROOMS.index(room)]
    return tuple(s for s in SHARED if (MODULE_UTILS / (s + ".py")).exists() and all(
        n.split(".", maxsplit=1)[0] in below for n in imported(MODULE_UTILS / (s + ".py"))))


def test_the_rooms_point_down():
    """A file of a room imports its own room's files, a lower room's and the shared ones below it only (a shared
    one that imports this room or a higher one is above it); the shared ones import only _host (the specs'
    defaults) or nothing."""
    upward = {}
    for path in mechanisms():
        name = name_of(path)
        room = name.split(".", maxsplit=1)[0]
        if room in ROOMS:
            allowed = ROOMS[:ROOMS.index(room) + 1] + shared_below(room)
        elif room in SHARED:
            allowed = ("_host",)
        else:  # _base, for the managers: the host's mechanisms and the specs
            allowed = ("_host", "_specs")
        wrong = sorted(n for n in imported(path) if n.split(".", maxsplit=1)[0] not in allowed)
        if wrong:
            upward[name] = wrong
    assert upward == {}


def test_the_check_of_the_rooms_finds_an_import_upward(tmp_path):
    room = tmp_path / "module_utils"
    for folder in ROOMS:
        (room / folder).mkdir(parents=True)
        (room / folder / "__init__.py").write_text("")
    (room / "_host" / "procfs.py").write_text(
        "from ansible_collections.inferops.sglang.plugins.module_utils._switch import states\n")
    globals()["MODULE_UTILS"] = room
    try:
        try:
            test_the_rooms_point_down()
        except AssertionError as e:
            assert "_host.procfs" in str(e) and "_switch.states" in str(e)
        else:
            raise AssertionError("an import of _switch from _host passed the check")
    finally:
        globals()["MODULE_UTILS"] = ROOT / "plugins" / "module_utils"


def test_the_check_of_the_rooms_finds_a_host_file_importing_the_specs(tmp_path):
    """_specs imports _host (its defaults): a _host file that imports _specs closes a circle."""
    room = tmp_path / "module_utils"
    for folder in ROOMS:
        (room / folder).mkdir(parents=True)
        (room / folder / "__init__.py").write_text("")
    (room / "_specs.py").write_text(
        "from ansible_collections.inferops.sglang.plugins.module_utils._host.nvidia import DEFAULT_DEVICES\n")
    (room / "_state_dir.py").write_text("")
    (room / "_host" / "unit.py").write_text(
        "from ansible_collections.inferops.sglang.plugins.module_utils._specs import check_unit_name\n"
        "from ansible_collections.inferops.sglang.plugins.module_utils import _state_dir\n")
    (room / "_server" / "port_units.py").write_text(
        "from ansible_collections.inferops.sglang.plugins.module_utils._specs import PORT_SPEC\n")
    globals()["MODULE_UTILS"] = room
    try:
        try:
            test_the_rooms_point_down()
        except AssertionError as e:
            assert "{'_host.unit': ['_specs']}" in str(e), str(e)
        else:
            raise AssertionError("an import of _specs from _host passed the check")
    finally:
        globals()["MODULE_UTILS"] = ROOT / "plugins" / "module_utils"
