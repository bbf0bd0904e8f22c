"""make build needs ansible-core and nothing else: in a bare copy of the tree (no test venv, no cache, no image),
with PATH holding only a venv of ansible-core alone and /usr/bin:/bin, it writes the tarball and nothing else;
without an ansible-galaxy on PATH it makes that venv itself (.cache/build-venv, once). The tarball holds what users
run, without the test bed's inventory, the workshop, or awx/ (AWX takes it from the git repository)."""
import json
import os
import shutil
import subprocess
import tarfile

import pytest
import yaml

from tests.unit.conftest import ROOT, copy_of_the_tree

VENV = ROOT / ".cache" / "build-venv"
SYSTEM = "/usr/bin:/bin"
VERSION = yaml.safe_load((ROOT / "galaxy.yml").read_text())["version"]


def make_build(path, dist, tree=ROOT):
    return subprocess.run(["make", "-C", str(tree), "build", "DIST=%s" % dist], stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, universal_newlines=True, check=False, timeout=300,
                          env={"PATH": path, "HOME": os.environ["HOME"], "LANG": "C.UTF-8"})


@pytest.fixture(scope="module")
def venv(tmp_path_factory):
    """The venv make build falls back to, made by make build itself when there is none yet."""
    if not (VENV / "bin" / "ansible-galaxy").exists():
        if shutil.which("ansible-galaxy", path=SYSTEM):
            pytest.skip("this machine has an ansible-galaxy in %s: make build uses it, and makes no venv" % SYSTEM)
        r = make_build(SYSTEM, tmp_path_factory.mktemp("first"))
        assert r.returncode == 0 and "no ansible-galaxy on PATH: a venv with ansible-core" in r.stdout, r.stdout
        assert (VENV / "bin" / "ansible-galaxy").exists(), r.stdout
    return VENV


@pytest.fixture(scope="module")
def built(venv, tmp_path_factory):
    """make build in a bare copy of the tree, with only the venv's bin and /usr/bin:/bin on PATH: (copy, before,
    after, the tarball)."""
    tree = copy_of_the_tree(tmp_path_factory.mktemp("tree"))
    before = files(tree)
    r = make_build("%s:%s" % (venv / "bin", SYSTEM), ".", tree)
    assert r.returncode == 0, r.stdout
    assert "a venv with ansible-core" not in r.stdout  # the ansible-galaxy on PATH was used
    return tree, before, files(tree), tree / ("inferops-sglang-%s.tar.gz" % VERSION)


@pytest.fixture(scope="module")
def tarball(built):
    return built[3]


def files(tree):
    return set(str(p.relative_to(tree)) for p in tree.rglob("*") if ".git" not in p.parts)


def test_the_build_venv_holds_ansible_core_alone(venv):
    """ansible-core and what it requires, nothing else (pip and setuptools come with every venv)."""
    r = subprocess.run([str(venv / "bin" / "python"), "-c", """if 1:
        import json, re
        from importlib import metadata
        from packaging.requirements import Requirement
        need, todo = set(), ["ansible-core"]
        while todo:
            name = re.sub(r"[-_.]+", "-", todo.pop()).lower()
            if name not in need:
                need.add(name)
                reqs = [Requirement(r) for r in metadata.requires(name) or []]
                todo += [r.name for r in reqs if not r.marker or r.marker.evaluate({"extra": ""})]
        have = set(re.sub(r"[-_.]+", "-", d.metadata["Name"]).lower() for d in metadata.distributions())
        print(json.dumps([sorted(need), sorted(have)]))"""], stdout=subprocess.PIPE, universal_newlines=True, check=True)
    need, have = json.loads(r.stdout)
    assert "ansible-core" in need and len(need) > 1
    assert set(have) - {"pip", "setuptools", "wheel"} == set(need)


def test_make_build_with_only_ansible_core_on_path_writes_the_tarball_and_nothing_else(built, tarball):
    before, after = built[1], built[2]
    assert after - before == set([tarball.name])
    manifest = json.load(tarfile.open(str(tarball)).extractfile("MANIFEST.json"))
    assert manifest["collection_info"]["version"] == VERSION


def test_without_an_ansible_galaxy_on_path_make_build_uses_its_venv(venv, tmp_path):
    if shutil.which("ansible-galaxy", path=SYSTEM):
        pytest.skip("this machine has an ansible-galaxy in %s" % SYSTEM)
    r = make_build(SYSTEM, tmp_path)
    assert r.returncode == 0, r.stdout
    assert (tmp_path / ("inferops-sglang-%s.tar.gz" % VERSION)).is_file()


def test_the_tarball_holds_what_users_run_and_not_the_test_bed(tarball):
    names = tarfile.open(str(tarball)).getnames()
    tops = set(n.split("/")[0] for n in names)
    assert {"plugins", "roles", "playbooks", "inventories", "docs", "meta", "changelogs", "README.md", "COPYING",
            "CHANGELOG.rst", "MANIFEST.json", "FILES.json", "execution-environment.yml"} <= tops
    assert not tops & {"molecule", "tests", "benchmarks", "awx", "Makefile", ".cache", ".venv", ".git"}
    assert "inventories/example/hosts.yml" in names
    assert [n for n in names if n.startswith("inventories/") and not n.startswith("inventories/example")] == []
    assert not [n for n in names if "__pycache__" in n or n.endswith((".pyc", ".tar.gz"))]
