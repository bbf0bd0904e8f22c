"""awx/: the surveys are what the roles' argument_specs say, and the job-template playbook parses with awx.awx."""
import json
import os
import subprocess
import sys

import pytest

from tests.unit.conftest import ROOT

sys.path.insert(0, str(ROOT / "awx"))
import generate_surveys  # noqa: E402  pylint: disable=wrong-import-position

KINDS = {"text", "textarea", "password", "integer", "float", "multiplechoice", "multiselect"}


def test_the_surveys_are_generated_from_the_current_argument_specs():
    assert generate_surveys.main(["--check"]) == 0, "run `make surveys`"


def test_a_changed_spec_makes_the_check_fail(monkeypatch):
    real = generate_surveys.options()
    changed = dict(real, cutover_new_knob={"type": "int", "default": 3, "description": "A new knob."})
    monkeypatch.setattr(generate_surveys, "options", lambda: changed)
    monkeypatch.setitem(generate_surveys.QUESTIONS, "cutover_new_knob", "How new is the knob?")
    assert generate_surveys.main(["--check"]) == 1
    real["cutover_port"] = dict(real["cutover_port"], description="Another text.")
    monkeypatch.setattr(generate_surveys, "options", lambda: real)
    assert generate_surveys.main(["--check"]) == 1


@pytest.mark.parametrize("name", ["cutover", "rollback", "status"])
def test_a_survey_asks_only_what_it_can_carry_and_overrides_nothing_unasked(name):
    survey = json.loads((ROOT / "awx" / "surveys" / ("%s.json" % name)).read_text())
    options = generate_surveys.options()
    plays = [q["variable"] for q in generate_surveys.PLAY]
    assert survey["spec"]
    for q in survey["spec"]:
        assert q["type"] in KINDS
        assert q["variable"].startswith("survey_")  # answers.yml sets the variable only from an answer not blank
        name = q["variable"][len("survey_"):]
        assert name in options or q["variable"] in plays
        assert "default" not in q and q["required"] is False  # a blank answer passes nothing: the inventory stands
        if name in options:
            assert options[name].get("type", "str") not in ("bool", "list", "dict")
            if "choices" in options[name]:
                assert q["type"] == "multiplechoice" and q["choices"] == [str(c) for c in options[name]["choices"]]


@pytest.mark.parametrize("name", ["cutover", "rollback", "status"])
def test_every_question_reads_as_a_question_not_a_variable_name(name):
    for q in json.loads((ROOT / "awx" / "surveys" / ("%s.json" % name)).read_text())["spec"]:
        title = q["question_name"]
        assert title.endswith("?") and title[0].isupper(), title
        assert "_" not in title and q["variable"] not in title, title


def test_a_new_askable_option_needs_its_question(monkeypatch):
    changed = dict(generate_surveys.options(), cutover_new_knob={"type": "int", "default": 3, "description": "A knob."})
    monkeypatch.setattr(generate_surveys, "options", lambda: changed)
    with pytest.raises(KeyError):
        generate_surveys.surveys()


def test_the_project_playbooks_import_the_collection_s_playbooks_after_the_answers():
    import yaml  # pylint: disable=import-outside-toplevel
    project = ROOT / "awx" / "project" / "playbooks"
    for name in ("cutover", "rollback", "status"):
        plays = yaml.safe_load((project / ("%s.yml" % name)).read_text())
        assert [p["ansible.builtin.import_playbook"] for p in plays] == ["answers.yml", "inferops.sglang." + name]


def test_the_cutover_template_asks_for_serial_and_the_failure_threshold():
    variables = [q["variable"] for q in json.loads((ROOT / "awx" / "surveys" / "cutover.json").read_text())["spec"]]
    assert "survey_cutover_serial" in variables and "survey_cutover_max_fail_percentage" in variables
    assert set(generate_surveys.not_asked()) >= {"cutover_command", "cutover_environment", "cutover_rollback"}
    assert not set("survey_" + n for n in generate_surveys.not_asked()) & set(variables)


def test_the_job_template_playbook_parses_with_awx_awx():
    r = subprocess.run([os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), "--syntax-check",
                        str(ROOT / "awx" / "configure.yml")], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       universal_newlines=True, check=False,
                       env=dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(ROOT / ".cache" / "collections")))
    assert r.returncode == 0, r.stdout


def test_every_awx_task_uses_only_the_module_s_documented_options():
    """ansible-lint's argument check does not reach awx.awx's modules (they subclass AnsibleModule): check each
    task's arguments against the module's own documentation, as ansible-doc renders it."""
    import yaml  # pylint: disable=import-outside-toplevel
    tasks = [t for play in yaml.safe_load((ROOT / "awx" / "configure.yml").read_text()) for t in play["tasks"]]
    used = dict((k, v) for t in tasks for k, v in t.items() if k.startswith("awx.awx."))
    assert len(used) == 5
    r = subprocess.run([os.path.join(os.path.dirname(sys.executable), "ansible-doc"), "--json", "-t", "module"]
                       + sorted(used), stdout=subprocess.PIPE, universal_newlines=True, check=True,
                       env=dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(ROOT / ".cache" / "collections")))
    docs = json.loads(r.stdout)
    for module, args in used.items():
        options = docs[module]["doc"]["options"]
        known = set(options) | set(a for o in options.values() for a in o.get("aliases", []))
        assert set(args) <= known, (module, set(args) - known)
        for name, opt in options.items():
            if opt.get("required"):
                assert name in args, (module, name)
            if "choices" in opt and name in args and "{{" not in str(args[name]):
                assert args[name] in opt["choices"], (module, name, args[name])
    assert used["awx.awx.job_template"]["job_slice_count"] == "{{ item.job_slice_count }}"
    plays = yaml.safe_load((ROOT / "awx" / "configure.yml").read_text())
    cutover = [t for t in plays[0]["vars"]["awx_templates"] if t["survey"] == "cutover"][0]
    assert cutover["job_slice_count"] == 1 and cutover["extra_vars"] == {}  # an extra var would beat a blank answer's default
    assert [t["playbook"] for t in plays[0]["vars"]["awx_templates"]] == ["playbooks/%s.yml" % n for n in (
        "cutover", "cutover", "rollback", "status")]
    assert used["awx.awx.job_template"]["job_type"] == "{{ item.job_type }}"
    assert used["awx.awx.job_template"]["diff_mode"] == "{{ item.diff_mode }}"
    for template in plays[0]["vars"]["awx_templates"]:
        assert template["job_type"] in docs["awx.awx.job_template"]["doc"]["options"]["job_type"]["choices"]


def templates():
    import yaml  # pylint: disable=import-outside-toplevel
    return yaml.safe_load((ROOT / "awx" / "configure.yml").read_text())[0]["vars"]["awx_templates"]


def test_the_look_first_template_runs_the_cutover_in_check_mode_with_diff():
    """The README's first step, --check --diff, from AWX: the cutover's playbook and survey, job type check."""
    check = [t for t in templates() if t["job_type"] == "check"]
    assert [(t["playbook"], t["survey"], t["diff_mode"]) for t in check] == [("playbooks/cutover.yml", "cutover", True)]
    assert [t["name"] for t in templates() if t["job_type"] == "run"] == [
        "inferops.sglang cutover", "inferops.sglang rollback", "inferops.sglang status"]
    assert len(set(t["name"] for t in templates())) == len(templates())


def test_awx_project_holds_what_the_templates_and_the_inventory_source_name():
    """awx/project/ is the root of the git repository AWX checks out: each template's playbook and the inventory
    source's file are there. No requirements file: the collection comes with the execution environment (one in the
    project would install a second copy ahead of it)."""
    import yaml  # pylint: disable=import-outside-toplevel
    project = ROOT / "awx" / "project"
    for template in templates():
        assert (project / template["playbook"]).is_file(), template["playbook"]
    source = yaml.safe_load((ROOT / "awx" / "configure.yml").read_text())[0]["vars"]["awx_inventory_source_path"]
    inventory = yaml.safe_load((project / source).read_text())
    assert inventory["all"]["children"]["sglang_servers"]["hosts"]
    assert not [p for p in ("requirements.yml", "collections/requirements.yml") if (project / p).exists()]


def test_awx_requirements_declare_every_collection_configure_yml_uses_at_the_version_tested():
    import yaml  # pylint: disable=import-outside-toplevel
    declared = dict((c["name"], c["version"]) for c in
                    yaml.safe_load((ROOT / "awx" / "requirements.yml").read_text())["collections"])
    tasks = [t for play in yaml.safe_load((ROOT / "awx" / "configure.yml").read_text()) for t in play["tasks"]]
    used = set(".".join(k.split(".")[:2]) for t in tasks for k in t if k.count(".") == 2) - {"ansible.builtin"}
    assert used == set(declared) == {"awx.awx"}
    tested = json.loads((ROOT / ".cache" / "collections" / "ansible_collections" / "awx" / "awx" / "MANIFEST.json")
                        .read_text())["collection_info"]["version"]
    assert declared["awx.awx"] == ">=%s" % tested
