"""Every role: argument_specs options are exactly its defaults' keys plus the required options, with the
same defaults; public variables carry the role's prefix; the README is the one generated from the specs."""
import re

import pytest
import yaml

from tests.tools.role_readme import render, roles

ROLES = roles()


def load(path):
    return yaml.safe_load(path.read_text()) or {}


@pytest.mark.parametrize("role", ROLES, ids=[r.name for r in ROLES])
def test_specs_match_defaults(role):
    options = load(role / "meta" / "argument_specs.yml")["argument_specs"]["main"]["options"]
    defaults = load(role / "defaults" / "main.yml")
    required = {k for k, v in options.items() if v.get("required")}
    assert set(options) == set(defaults) | required
    assert not required & set(defaults), "a required option has no default"
    for name, value in defaults.items():
        assert options[name].get("default") == value, "%s: spec default %r, defaults/main.yml %r" % (
            name, options[name].get("default"), value)


@pytest.mark.parametrize("role", ROLES, ids=[r.name for r in ROLES])
def test_public_variables_carry_the_prefix(role):
    options = load(role / "meta" / "argument_specs.yml")["argument_specs"]["main"]["options"]
    assert all(name.startswith(role.name + "_") for name in options)
    internal = role / "vars" / "main.yml"
    if internal.exists():
        assert all(name.startswith("_" + role.name + "_") for name in load(internal))


@pytest.mark.parametrize("role", ROLES, ids=[r.name for r in ROLES])
def test_readme_is_generated_from_the_specs(role):
    assert (role / "README.md").read_text() == render(role), "run `make readmes`"


def includes(path):
    """(the task's name, a task file it includes or imports) for each file a task of path names: as written, or each
    that a template picks from ('a.yml' if ... else 'b.yml'); {{ role_path }} stands for the role's folder. A file
    given by a variable (an operator's hook) is not the role's."""
    role = path.parents[[p.name for p in path.parents].index("tasks") + 1] if "tasks" in path.parts else None
    for t in tasks(load(path)):
        for key in ("ansible.builtin.include_tasks", "ansible.builtin.import_tasks"):
            target = t.get(key)
            target = target.get("file") if isinstance(target, dict) else target
            if target:
                target = target.replace("{{ role_path }}", str(role))
                for name in (re.findall(r"'([\w/.-]+\.yml)'", target) if "{{" in target else [target]):
                    yield t["name"], name


@pytest.mark.parametrize("role", ROLES, ids=[r.name for r in ROLES])
def test_each_include_names_one_file(role):
    """A bare name is looked for in the role's tasks/ and beside the includer, in an order of Ansible's (include_tasks:
    tasks/ first, ansible/playbook/included_file.py; import_tasks: beside the includer first, playbook/helpers.py):
    a name that both hold names two files, and the one that runs may not be the one meant. A mode's folder that
    included `rollback.yml` ran tasks/rollback.yml, the one-host rollback, in place of its own group/rollback.yml."""
    root = role / "tasks"
    wrong = []
    for path in sorted(root.rglob("*.yml")):
        for name, target in includes(path):
            found = set(p.resolve() for p in (root / target, path.parent / target) if p.exists())
            if len(found) != 1:
                wrong.append("%s, %r: %s" % (path.relative_to(root), name, sorted(map(str, found)) or "no file"))
    assert wrong == []


# The cutover role: each stage is a task file named for it (STAGE.yml, STAGE_PART.yml; a mode's in its folder,
# tasks/MODE/, whose main.yml holds the mode's stages), whose tasks' names start with the stage (docs/cutover.md); an
# entry point's file is named for the entry point.
CUTOVER = ROLES[[r.name for r in ROLES].index("cutover")]
STAGES = {"discover": "Discover", "plan": "Plan", "prepare": "Prepare", "preflight": "Preflight", "switch": "Switch",
          "wait_and_verify": "Wait and verify", "bench": "Bench", "venv": "Venv", "record": "Record",
          "rollback": "Rollback", "rollback_on_purpose": "Rollback on purpose", "status": "Status"}
MODES = {"adopt": ["Adopt in place"], "switch": ["Preflight", "Switch", "Wait and verify", "Rollback", "Record"],
         "group": ["Preflight", "Switch", "Wait and verify", "Rollback", "Record"]}


def tasks(items):
    for t in items or []:
        yield t
        for key in ("block", "rescue", "always"):
            yield from tasks(t.get(key))


def task_files():
    return sorted(p for p in (CUTOVER / "tasks").rglob("*.yml") if p != CUTOVER / "tasks" / "main.yml")


def named_for(path):
    return [t["name"] for t in tasks(load(path))]


# The one part that several stages include (the progress of an async call): its tasks' names start with the stage
# its includer gives it, and every include of it gives one of the includer's own stages.
SHARED = {"progress.yml": "_cutover_progress_stage"}


@pytest.mark.parametrize("path", task_files(), ids=lambda p: str(p.relative_to(CUTOVER / "tasks")))
def test_a_cutover_task_file_holds_tasks_of_the_stage_it_is_named_for(path):
    if path.parent == CUTOVER / "tasks" and path.name in SHARED:
        stages = ["{{ %s }}" % SHARED[path.name]]
    elif path.name == "main.yml":
        stages = MODES[path.parent.name]
    else:
        stages = [STAGES[max((k for k in STAGES if path.stem == k or path.stem.startswith(k + "_")), key=len)]]
    names = named_for(path)
    assert names and [n for n in names if not any(n == s or n.startswith(s + " - ") for s in stages)] == []


@pytest.mark.parametrize("shared", sorted(SHARED))
def test_a_shared_part_is_named_for_the_stage_of_each_includer(shared):
    given = []
    for path in task_files():
        if path.parent == CUTOVER / "tasks" and path.name in SHARED:
            continue
        if path.name == "main.yml":
            stages = MODES[path.parent.name]
        else:
            stages = [STAGES[max((k for k in STAGES if path.stem == k or path.stem.startswith(k + "_")), key=len)]]
        for t in tasks(load(path)):
            include = t.get("ansible.builtin.include_tasks")
            include = include.get("file") if isinstance(include, dict) else include
            if include and include.rsplit("/", 1)[-1] == shared:
                stage = (t.get("vars") or {}).get(SHARED[shared])
                given.append(stage)
                assert stage in stages and t["name"].startswith(stage + " - "), (path, t["name"], stage)
    assert len(given) >= 2, given  # shared: included by two at least


def test_the_mode_is_decided_once_at_its_include():
    """tasks/main.yml asks cutover_mode once to run a mode, in the include of the mode's folder (a multi-node server's
    group is a mode of its own); beside it only the input check names it, to refuse a group adopted in place; no other
    task file, the internal variables and no template ask it again."""
    main = load(CUTOVER / "tasks" / "main.yml")
    asking = [t for t in tasks(main) if "cutover_mode" in yaml.safe_dump(t) and "ansible.builtin.assert" not in t]
    assert [t.get("ansible.builtin.include_tasks") for t in asking] == [
        "{{ 'group' if cutover_multinode_group else cutover_mode }}/main.yml"]
    assert sorted(p.name for p in (CUTOVER / "tasks").iterdir() if p.is_dir()) == sorted(MODES)
    others = task_files() + [CUTOVER / "vars" / "main.yml"] + sorted((CUTOVER / "templates").glob("*"))
    counts = dict((str(p.relative_to(CUTOVER)), p.read_text().count("cutover_mode")) for p in others if p.is_file())
    assert counts and set(counts.values()) == {0}, counts


def test_the_cutover_s_facts_are_set_once_and_its_registered_results_carry_one_prefix():
    set_in, registered = {}, []
    for path in sorted((CUTOVER / "tasks").rglob("*.yml")):
        for t in tasks(load(path)):
            for name in t.get("ansible.builtin.set_fact", {}):
                set_in.setdefault(name, []).append(str(path.relative_to(CUTOVER / "tasks")))
            if "register" in t:
                registered.append(t["register"])
    # each mode's folder leaves what the record stage reads (_cutover_done), once; each that rolls back, what the role
    # says last (_cutover_rolled_back)
    assert sorted(set_in.pop("_cutover_done")) == ["adopt/main.yml", "group/main.yml", "switch/main.yml"]
    assert sorted(set_in.pop("_cutover_rolled_back")) == ["group/main.yml", "switch/main.yml"]
    assert all(n.startswith("_cutover_") for n in set_in) and all(len(v) == 1 for v in set_in.values()), set_in
    assert registered and all(n.startswith("__cutover_") for n in registered), registered
    internal = (CUTOVER / "vars" / "main.yml").read_text()
    assert "__cutover_" not in internal and not [n for n in set_in if n in internal]  # vars/: the inputs' alone


def test_the_discovery_is_given_the_environment_s_cache_variables_only():
    """The unit made from variables alone: the discovery reads HOME and the cache variables of its environment, and is
    given those only (a module's arguments reach the host's log; the others may be secrets)."""
    from ansible_collections.inferops.sglang.plugins.module_utils._host.caches import CACHE_VARIABLES

    assert load(CUTOVER / "vars" / "main.yml")["_cutover_cache_variables"] == list(CACHE_VARIABLES)
    task = next(t for t in tasks(load(CUTOVER / "tasks" / "discover.yml")) if "inferops.sglang.sglang_discover" in t)
    assert "selectattr('key', 'in', _cutover_cache_variables)" in task["inferops.sglang.sglang_discover"]["environment"]
