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
STAGES = ["Discover - ", "Adopt - ", "Prepare - ", "Switch - ", "Wait and verify - ", "Record - "]


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
def test_ansible_playbook_inferops_sglang_cutover_by_fqcn(host):
    log = open(os.path.join(RELEASE, "cli-cutover.log")).read()
    recap = [line for line in log.splitlines() if line.startswith("cli ")][-1]
    assert "failed=0" in recap and "unreachable=0" in recap
    assert "PLAY [Cut over SGLang servers to systemd]" in log
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


def test_ansible_builder_writes_a_build_context_and_reads_the_collection_needs(tmp_path):
    ctx = tmp_path / "context"
    r = subprocess.run([os.path.join(TOOLS, "ansible-builder"), "create", "-f",
                        os.path.join(ROOT, "execution-environment.yml"), "-c", str(ctx), "--output-filename",
                        "Containerfile"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True,
                       check=False)
    assert r.returncode == 0, r.stdout
    containerfile = (ctx / "Containerfile").read_text()
    assert "ansible-galaxy collection install" in containerfile or "install-from-bindep" in containerfile
    reqs = yaml.safe_load((ctx / "_build" / "requirements.yml").read_text())
    assert [c["name"] for c in reqs["collections"]] == ["inferops.sglang"]
    # what the collection itself asks of an image: from its meta/execution-environment.yml, as the build reads it
    r = subprocess.run([os.path.join(TOOLS, "ansible-builder"), "introspect", "--sanitize", INSTALLED],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True, check=False)
    assert r.returncode == 0, r.stdout
    assert "openssh-client [platform:dpkg]" in r.stdout and "openssh-clients [platform:rpm]" in r.stdout
    needs = yaml.safe_load(r.stdout[r.stdout.index("python:"):]) if "python:" in r.stdout else {}
    assert not needs.get("python")  # nothing in Python beyond ansible-core


def awx_private_data_dir(d, address):
    """A private_data_dir as AWX lays one out for a job of the cutover template."""
    for sub in ("env", "inventory", "project", "artifacts"):
        os.makedirs(os.path.join(d, sub))
    # the project: the operations repository's checkout, laid out like this one (playbooks/, inventories/)
    shutil.copytree(os.path.join(ROOT, "playbooks"), os.path.join(d, "project", "playbooks"))
    # the survey's answers, and the template's own extra vars (serial, max_fail_percentage)
    extravars = os.path.join(d, "env", "extravars")
    with open(extravars, "w") as f:
        yaml.safe_dump({"cutover_serial": "100%", "cutover_max_fail_percentage": 0, "cutover_timeout_start_sec": 120,
                        "cutover_drain_sec": 20}, f)
    os.chmod(extravars, 0o400)
    hosts = os.path.join(d, "inventory", "hosts")
    with open(hosts, "w") as f:
        f.write("#!%s\nimport json, sys\nhostvars = %r\n"
                "if '--host' in sys.argv:\n    print(json.dumps(hostvars[sys.argv[-1]]))\n"
                "else:\n    print(json.dumps({'sglang_servers': {'hosts': ['awx']}, '_meta': {'hostvars': hostvars}}))\n"
                % (sys.executable, {"awx": {"ansible_host": address, "ansible_port": 22, "ansible_user": "root"}}))
    os.chmod(hosts, 0o700)
    shutil.copy(KEY, os.path.join(d, "env", "ssh_key"))  # the machine credential: runner loads it into an ssh-agent
    os.chmod(os.path.join(d, "env", "ssh_key"), 0o600)
    with open(os.path.join(d, "env", "cmdline"), "w") as f:
        f.write("--become --limit awx")
    with open(os.path.join(d, "env", "settings"), "w") as f:
        yaml.safe_dump({"job_timeout": 900, "idle_timeout": 600, "suppress_ansible_output": True}, f)
    with open(os.path.join(d, "env", "envvars"), "w") as f:
        # the execution environment: the collection installed where ansible finds it, nothing else around it
        yaml.safe_dump({"ANSIBLE_COLLECTIONS_PATH": INSTALLED, "ANSIBLE_COLLECTIONS_SCAN_SYS_PATH": "false",
                        "ANSIBLE_CONFIG": os.path.join(RELEASE, "ansible.cfg"),
                        "ANSIBLE_HOST_KEY_CHECKING": "False", "ANSIBLE_PIPELINING": "True", "ANSIBLE_FORCE_COLOR": "0"}, f)
    return extravars


@pytest.mark.hosts("awx")
def test_awx_job_through_ansible_runner(host, tmp_path):
    import ansible_runner  # pylint: disable=import-outside-toplevel

    d = str(tmp_path / "awx-job")
    extravars = awx_private_data_dir(d, host.ansible.get_variables()["ansible_host"])
    assert stat.S_IMODE(os.stat(extravars).st_mode) == 0o400
    events = []
    r = ansible_runner.run(private_data_dir=d, playbook="playbooks/cutover.yml",
                           event_handler=lambda e: events.append(e) or True,  # True: the event is kept in artifacts/
                           quiet=True)  # ansible-playbook from PATH, as in an execution environment
    assert (r.status, r.rc) == ("successful", 0), "".join(e.get("stdout", "") for e in events)[-4000:]
    tasks = [e["event_data"].get("task") for e in events if e.get("event") == "playbook_on_task_start"]
    stages = [s for t in tasks for s in STAGES if (t or "").startswith(s)]
    assert [s for i, s in enumerate(stages) if i == 0 or stages[i - 1] != s] == STAGES  # each stage in order
    assert [t for t in tasks if t.startswith("Switch - stop the family")]
    assert r.stats["failures"] == {} and r.stats["ok"].get("awx", 0) > 0
    serves_from_the_unit(host)
