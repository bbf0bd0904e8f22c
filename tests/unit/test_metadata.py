"""What galaxy.yml and the docs say of the collection agree: one repository URL, the tarball's content as the README
describes it (no awx/, no test-bed inventory), and the playbooks' host pattern, cutover_hosts, documented as the
playbook variable it is."""
import re

import yaml

from tests.unit.conftest import ROOT

GALAXY = yaml.safe_load((ROOT / "galaxy.yml").read_text())
README = (ROOT / "README.md").read_text()
HOSTS = "{{ cutover_hosts | default('sglang_servers') }}"


def test_one_repository_url():
    repository = GALAXY["repository"]
    assert GALAXY["documentation"].startswith(repository + "/") and GALAXY["issues"].startswith(repository + "/")
    git_urls = set(re.findall(r"https://\S+?\.git\b", README + (ROOT / "awx" / "README.md").read_text()))
    collection = set(u for u in git_urls if "gpu-fleet" not in u)  # the AWX project is the user's own repository
    assert collection == {repository + ".git"}


def test_the_readme_says_what_the_tarball_leaves_out():
    ignored = GALAXY["build_ignore"]
    assert "awx" in ignored and "inventories/demo" in ignored
    assert "it is not in the tarball" in README
    assert re.search(r"`inventories/` \| `demo/` \([^)]*not in the tarball\)", README)


def test_every_playbook_runs_on_cutover_hosts_a_playbook_variable_documented_as_an_extra_var():
    playbooks = sorted((ROOT / "playbooks").glob("*.yml")) + [ROOT / "awx" / "project" / "playbooks" / "answers.yml"]
    plays = [p for f in playbooks for p in yaml.safe_load(f.read_text()) if "hosts" in p]
    assert len(plays) >= 5 and set(p["hosts"] for p in plays) == {HOSTS}
    for role in (ROOT / "roles").iterdir():
        for spec in (role / "defaults" / "main.yml", role / "meta" / "argument_specs.yml"):
            assert not spec.exists() or "cutover_hosts" not in spec.read_text(), spec
    cutover = (ROOT / "docs" / "cutover.md").read_text()
    for doc in (README, cutover):
        assert "-e cutover_hosts=" in doc and re.search(r"extra\s+var", doc.split("cutover_hosts", 1)[1][:600])
