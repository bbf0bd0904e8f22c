"""The collection as released: the tarball's content, the FQCN playbook from it (cli), the AWX way with
ansible-runner on a private_data_dir as AWX lays one out (awx), galaxy-importer, ansible-builder, ansible-doc."""
import glob
import json
import os
import shutil
import stat
import subprocess
import sys
import tarfile

import pytest
import yaml
from serving import serves_from_its_unit  # pylint: disable=import-error

SCENARIO = os.environ.get("MOLECULE_SCENARIO_DIRECTORY", os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ROOT = os.path.dirname(os.path.dirname(SCENARIO))
RELEASE = os.path.join(os.environ.get("MOLECULE_EPHEMERAL_DIRECTORY", "/nonexistent"), "release")
VERSION = yaml.safe_load(open(os.path.join(ROOT, "galaxy.yml")))["version"]
TARBALL = os.path.join(RELEASE, "dist", "inferops-sglang-%s.tar.gz" % VERSION)
INSTALLED = os.path.join(RELEASE, "collections")
TOOLS = os.path.join(ROOT, ".venv-release", "bin")
BIN = os.path.dirname(sys.executable)
UNIT = "sglang-30000.service"
KEY = os.path.join(ROOT, ".cache", "ssh", "id_ed25519")
# Each task's name starts with its stage, as AWX's job output shows them.
STAGES = ["Discover - ", "Plan - ", "Prepare - ", "Switch - ", "Wait and verify - ", "Record - "]


def alone(**extra):
    """The environment of a user who has only the installed tarball."""
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=INSTALLED, ANSIBLE_COLLECTIONS_SCAN_SYS_PATH="false",
               ANSIBLE_CONFIG=os.path.join(RELEASE, "ansible.cfg"), ANSIBLE_NOCOLOR="1")
    env.update(extra)
    return env


def serves_from_the_unit(host):
    """The unit serves the port (molecule/shared/serving.py), and its record says it switched."""
    serves_from_its_unit(host)
    assert json.loads(host.file("/var/lib/inferops/cutover/30000/last.json").content_string)["action"] == "switch"


def test_the_tarball_holds_what_users_run_and_nothing_of_the_workshop():
    names = tarfile.open(TARBALL).getnames()
    tops = set(n.split("/")[0] for n in names)
    assert {"plugins", "roles", "playbooks", "inventories", "docs", "meta", "changelogs", "README.md", "COPYING",
            "CHANGELOG.rst", "MANIFEST.json", "FILES.json", "execution-environment.yml"} <= tops
    assert not tops & {"molecule", "tests", "benchmarks", ".venv", ".venv-release", ".cache", ".git", "awx", ".whl"}
    assert not [n for n in names if "__pycache__" in n or n.endswith(".pyc")]
    assert "playbooks/cutover.yml" in names and "meta/runtime.yml" in names


def test_installed_alone_into_an_empty_collections_path():
    found = sorted(os.listdir(os.path.join(INSTALLED, "ansible_collections")))
    assert found == ["inferops"]
    out = subprocess.run([os.path.join(BIN, "ansible-galaxy"), "collection", "list", "-p", INSTALLED],
                         stdout=subprocess.PIPE, universal_newlines=True, env=alone(), check=True).stdout
    assert "inferops.sglang %s" % VERSION in " ".join(out.split())


@pytest.mark.hosts("cli")
def test_the_readme_quick_start_as_written_on_cli(host):
    """converge.yml ran the README's quick-start block (only the address changed): the install from the tarball into
    an empty collections path, --check --diff, the cutover and the status by FQCN."""
    log = open(os.path.join(RELEASE, "cli-quickstart.log")).read()
    assert "was installed successfully" in log
    recaps = [line for line in log.splitlines() if line.startswith("gpu1 ")]
    assert len(recaps) == 3 and all("failed=0" in r and "unreachable=0" in r for r in recaps), recaps
    assert log.count("PLAY [Cut over SGLang servers to systemd]") == 2 and "PLAY [Status of SGLang servers]" in log
    assert "check mode: nothing was changed; the plan is above" in log
    serves_from_the_unit(host)


def test_ansible_doc_renders_every_module_and_filter_from_the_tarball():
    modules = sorted(os.path.basename(p)[:-3] for p in glob.glob(os.path.join(ROOT, "plugins", "modules", "*.py")))
    filters = sorted(os.path.basename(p)[:-4] for p in glob.glob(os.path.join(ROOT, "plugins", "filter", "*.yml")))
    assert len(modules) >= 7 and len(filters) >= 6
    for kind, names in (("module", modules), ("filter", filters)):
        r = subprocess.run([os.path.join(BIN, "ansible-doc"), "-t", kind] + ["inferops.sglang." + n for n in names],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True, env=alone(),
                           check=False)
        assert r.returncode == 0 and "[WARNING]" not in r.stdout and "ERROR" not in r.stdout, r.stdout[-2000:]
        for name in names:
            assert "inferops.sglang.%s" % name in r.stdout


def test_galaxy_importer_finds_no_error_and_no_warning(tmp_path):
    r = subprocess.run([os.path.join(TOOLS, "python"), "-m", "galaxy_importer.main", TARBALL], cwd=str(tmp_path),
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True, check=False,
                       env=dict(os.environ, PATH=TOOLS + os.pathsep + os.environ["PATH"]))
    assert r.returncode == 0, r.stdout[-3000:]
    assert "Importer processing completed successfully" in r.stdout
    problems = [line for line in r.stdout.splitlines() if line.startswith(("WARNING", "ERROR"))]
    assert problems == []


def test_ansible_builder_writes_a_build_context_that_installs_the_local_tarball(tmp_path):
    """What `ansible-builder build` builds from (podman cannot reach the network here): the context holds the
    tarball, and its requirements install it - run as the image's galaxy stage runs them, offline."""
    shutil.copy(os.path.join(ROOT, "execution-environment.yml"), str(tmp_path))
    shutil.copy(TARBALL, str(tmp_path))  # where `make build` leaves it, beside execution-environment.yml
    ctx = tmp_path / "context"
    r = subprocess.run([os.path.join(TOOLS, "ansible-builder"), "create", "-c", str(ctx), "--output-filename",
                        "Containerfile"], cwd=str(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       universal_newlines=True, check=False)
    assert r.returncode == 0, r.stdout
    containerfile = (ctx / "Containerfile").read_text()
    assert "COPY _build /build" in containerfile and "ansible-galaxy collection install" in containerfile
    build = ctx / "_build"
    assert (build / "collections" / os.path.basename(TARBALL)).is_file()
    installed = tmp_path / "image-collections"
    r = subprocess.run([os.path.join(BIN, "ansible-galaxy"), "collection", "install", "--offline", "-r",
                        "requirements.yml", "--collections-path", str(installed)], cwd=str(build),
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True,
                       env=alone(ANSIBLE_COLLECTIONS_PATH=str(installed)), check=False)  # the image has none yet
    assert r.returncode == 0, r.stdout
    assert os.listdir(str(installed / "ansible_collections")) == ["inferops"], r.stdout
    manifest = json.load(open(str(installed / "ansible_collections" / "inferops" / "sglang" / "MANIFEST.json")))
    assert manifest["collection_info"]["version"] == VERSION
    # what the collection itself asks of an image: from its meta/execution-environment.yml, as the build reads it
    r = subprocess.run([os.path.join(TOOLS, "ansible-builder"), "introspect", "--sanitize", INSTALLED],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True, check=False)
    assert r.returncode == 0, r.stdout
    assert "openssh-client [platform:dpkg]" in r.stdout and "openssh-clients [platform:rpm]" in r.stdout
    needs = yaml.safe_load(r.stdout[r.stdout.index("python:"):]) if "python:" in r.stdout else {}
    assert not needs.get("python")  # nothing in Python beyond ansible-core


def awx_private_data_dir(d, address, answers, cmdline):
    """A private_data_dir as AWX lays one out for a job of the cutover template."""
    for sub in ("env", "inventory", "artifacts"):
        os.makedirs(os.path.join(d, sub))
    # the project's checkout: awx/project/, thin playbooks that read the survey's answers and import the collection's
    shutil.copytree(os.path.join(ROOT, "awx", "project"), os.path.join(d, "project"))
    # the survey's answers (the template has no extra vars of its own)
    extravars = os.path.join(d, "env", "extravars")
    with open(extravars, "w") as f:
        yaml.safe_dump(answers, f)
    os.chmod(extravars, 0o400)
    hostvars = {"awx": {"ansible_host": address, "ansible_port": 22, "ansible_user": "root",
                        "cutover_timeout_start_sec": 120, "cutover_drain_sec": 20}}
    hosts = os.path.join(d, "inventory", "hosts")
    with open(hosts, "w") as f:
        f.write("#!%s\nimport json, sys\nhostvars = %r\n"
                "if '--host' in sys.argv:\n    print(json.dumps(hostvars[sys.argv[-1]]))\n"
                "else:\n    print(json.dumps({'sglang_servers': {'hosts': ['awx']}, '_meta': {'hostvars': hostvars}}))\n"
                % (sys.executable, hostvars))
    os.chmod(hosts, 0o700)
    shutil.copy(KEY, os.path.join(d, "env", "ssh_key"))  # the machine credential: runner loads it into an ssh-agent
    os.chmod(os.path.join(d, "env", "ssh_key"), 0o600)
    with open(os.path.join(d, "env", "cmdline"), "w") as f:
        f.write(cmdline)
    with open(os.path.join(d, "env", "settings"), "w") as f:
        yaml.safe_dump({"job_timeout": 900, "idle_timeout": 600, "suppress_ansible_output": True}, f)
    with open(os.path.join(d, "env", "envvars"), "w") as f:
        # the execution environment: the collection installed where ansible finds it, nothing else around it
        yaml.safe_dump({"ANSIBLE_COLLECTIONS_PATH": INSTALLED, "ANSIBLE_COLLECTIONS_SCAN_SYS_PATH": "false",
                        "ANSIBLE_CONFIG": os.path.join(RELEASE, "ansible.cfg"),
                        "ANSIBLE_HOST_KEY_CHECKING": "False", "ANSIBLE_PIPELINING": "True", "ANSIBLE_FORCE_COLOR": "0"}, f)
    return extravars


def awx_job(host, d, answers, cmdline="--become --limit awx"):
    import ansible_runner  # pylint: disable=import-outside-toplevel

    extravars = awx_private_data_dir(d, host.ansible.get_variables()["ansible_host"], answers, cmdline)
    assert stat.S_IMODE(os.stat(extravars).st_mode) == 0o400
    events = []
    r = ansible_runner.run(private_data_dir=d, playbook="playbooks/cutover.yml",
                           event_handler=lambda e: events.append(e) or True,  # True: the event is kept in artifacts/
                           quiet=True)  # ansible-playbook from PATH, as in an execution environment
    assert (r.status, r.rc) == ("successful", 0), "".join(e.get("stdout", "") for e in events)[-4000:]
    return r, events


@pytest.mark.hosts("awx")
def test_awx_job_through_ansible_runner(host, tmp_path):
    answers = {"survey_cutover_serial": "100%", "survey_cutover_max_fail_percentage": 0, "survey_cutover_port": 30000}
    # the look-first template first: job type check with diff, as AWX runs it (--check --diff); it changes nothing
    r, events = awx_job(host, str(tmp_path / "look-first"), answers, "--become --limit awx --check --diff")
    assert "check mode: nothing was changed; the plan is above" in "".join(e.get("stdout", "") for e in events)
    assert not host.file("/var/lib/inferops/cutover/30000/last.json").exists
    assert not host.service(UNIT).is_running
    r, events = awx_job(host, str(tmp_path / "awx-job"), answers)
    tasks = [e["event_data"].get("task") for e in events if e.get("event") == "playbook_on_task_start"]
    stages = [s for t in tasks for s in STAGES if (t or "").startswith(s)]
    assert [s for i, s in enumerate(stages) if i == 0 or stages[i - 1] != s] == STAGES  # each stage in order
    assert [t for t in tasks if t.startswith("Switch - stop the family")]
    assert r.stats["failures"] == {} and r.stats["ok"].get("awx", 0) > 0
    serves_from_the_unit(host)


def every_answer_blank(host, d, blank):
    """AWX sends a blank answer as "" (most releases) or null (24.6.1): each means the inventory's value, else the
    default. On the host the first job migrated, the job succeeds and changes nothing (the inventory's drain and
    start timeout stand: a default in their place would change the unit)."""
    spec = json.load(open(os.path.join(ROOT, "awx", "surveys", "cutover.json")))["spec"]
    answers = dict((q["variable"], blank) for q in spec if not q["required"])
    assert len(answers) == len(spec) >= 10
    r, events = awx_job(host, d, answers)
    assert r.stats["failures"] == {} and r.stats["changed"] == {}, r.stats
    answered = [e for e in events if e.get("event") == "runner_on_ok" and e["event_data"]["task"].startswith("Answers - ")]
    assert answered == []  # every answer was blank: no variable was set from one
    serves_from_the_unit(host)


# (two tests, not one parametrized: the host filter of molecule/shared/testinfra_hosts.py reads the test's id)
@pytest.mark.hosts("awx")
def test_awx_job_with_every_answer_empty(host, tmp_path):
    every_answer_blank(host, str(tmp_path / "awx-job"), "")


@pytest.mark.hosts("awx")
def test_awx_job_with_every_answer_null(host, tmp_path):
    every_answer_blank(host, str(tmp_path / "awx-job"), None)
