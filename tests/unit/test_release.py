"""make release (tests/tools/release.py): refuses what cannot be the next version and changes nothing then; releasing
the next version in a copy of the tree lists every module, plugin and role, regenerates CHANGELOG.rst, bumps
galaxy.yml and every name that carries the version, and the tarball it builds installs over this one's with
--upgrade. The versions named in the tree are galaxy.yml's."""
import json
import os
import subprocess
import sys

import pytest
import semantic_version
import yaml

from tests.tools import release
from tests.unit.conftest import ROOT, copy_of_the_tree
from tests.unit.test_changelog import contents, listed, missing_from_the_collection, unlisted

BIN = os.path.dirname(sys.executable)
CURRENT = release.current()
NEXT = str(semantic_version.Version(CURRENT).next_minor())


def snapshot(tree):
    return dict((str(p.relative_to(tree)), p.read_bytes()) for p in sorted(tree.rglob("*"))
                if p.is_file() and ".git" not in p.parts)


def make_release(tree, *args):
    """What `make release VERSION=... DATE=...` runs, in the copy."""
    return subprocess.run([sys.executable, str(tree / "tests" / "tools" / "release.py")] + list(args), cwd=str(tree),
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True, check=False)


def build(tree, out):
    r = subprocess.run([os.path.join(BIN, "ansible-galaxy"), "collection", "build", str(tree), "--output-path",
                        str(out)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True,
                       check=False)
    assert r.returncode == 0, r.stdout
    (tarball,) = out.glob("*.tar.gz")
    return tarball


def install(tarball, into, *args):
    return subprocess.run([os.path.join(BIN, "ansible-galaxy"), "collection", "install", "--offline", "-p", str(into),
                           str(tarball)] + list(args), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          universal_newlines=True, env=dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(into)), check=False)


def installed_version(into):
    manifest = into / "ansible_collections" / "inferops" / "sglang" / "MANIFEST.json"
    return json.loads(manifest.read_text())["collection_info"]["version"]


@pytest.fixture(scope="module")
def released(tmp_path_factory):
    """A copy of the tree, released as the next minor version."""
    base = tmp_path_factory.mktemp("release")
    tree = copy_of_the_tree(base)
    r = make_release(tree, NEXT, "--date", "2026-12-01")
    return base, tree, r


@pytest.mark.parametrize("version", ["0.2", "v0.2.0", "0.2.0.1", "01.2.0", "0.2.0-", "0.2.0 ", ""])
def test_a_version_that_is_not_semver_is_refused_naming_the_rule_and_the_value(version):
    with pytest.raises(release.Refused) as e:
        release.check(version)
    assert "semantic versioning" in str(e.value) and "got %r" % version in str(e.value)


@pytest.mark.parametrize("version", [CURRENT, "0.0.9", "%s-rc.1" % CURRENT])
def test_a_version_not_greater_than_the_current_one_is_refused(version):
    with pytest.raises(release.Refused) as e:
        release.check(version)
    assert str(e.value) == "VERSION must be greater than the current version %s (galaxy.yml): got %s" % (
        CURRENT, version)


def test_greater_versions_pass_the_check():
    for version in (NEXT, str(semantic_version.Version(CURRENT).next_patch()), "%s-rc.1" % NEXT, "%s+build.7" % NEXT):
        release.check(version)


def test_a_refused_release_changes_nothing(tmp_path):
    tree = copy_of_the_tree(tmp_path)
    before = snapshot(tree)
    for args in (["0.2"], [CURRENT], [NEXT, "--date", "1 Dec 2026"]):
        r = make_release(tree, *args)
        assert r.returncode == 1 and r.stdout.startswith("make release: "), r.stdout
    assert snapshot(tree) == before


def test_the_next_release_lists_everything_and_bumps_every_version(released):
    base, tree, r = released
    assert r.returncode == 0, r.stdout
    assert release.current(tree) == NEXT and NEXT in release.releases(tree)
    assert yaml.safe_load((tree / "changelogs" / "changelog.yaml").read_text())["releases"][NEXT]["release_date"] == \
        "2026-12-01"
    assert list((tree / "changelogs" / "fragments").glob("*.yml")) == []
    rst = (tree / "CHANGELOG.rst").read_text()
    assert rst.index("v%s\n" % NEXT) < rst.index("v%s\n" % CURRENT)
    have = contents(str(base))
    assert unlisted(have, tree) == {}  # every module, plugin and role is in a release
    assert missing_from_the_collection(have, tree) == []
    assert set(release.versions_named(tree).values()) == {NEXT}
    assert set((k, n) for k, n, v in listed(tree) if v == NEXT) >= set(
        tuple(w.split(" ")) for w in unlisted(contents(), ROOT))  # what is unlisted here comes in the next release


def test_the_next_release_s_tarball_installs_over_this_one_with_upgrade(released, tmp_path):
    tree, r = released[1], released[2]
    assert r.returncode == 0, r.stdout
    into = tmp_path / "collections"
    assert install(build(ROOT, tmp_path / "now"), into).returncode == 0
    assert installed_version(into) == CURRENT
    newer = build(tree, tmp_path / "next")
    assert newer.name == "inferops-sglang-%s.tar.gz" % NEXT
    r = install(newer, into, "--upgrade")
    assert r.returncode == 0, r.stdout
    assert installed_version(into) == NEXT


def test_the_versions_the_tree_names_are_galaxy_yml_s():
    named = release.versions_named()
    assert len(named) >= 5  # README.md, execution-environment.yml, awx/
    assert dict((where, v) for where, v in named.items() if v != CURRENT) == {}


def test_the_versioned_names_are_found_and_rewritten():
    text = "install inferops-sglang-%s.tar.gz; tag inferops-sglang-ee:%s; not inferops-sglang-VERSION.tar.gz" % (
        CURRENT, CURRENT)
    assert [m.group(0) for m in release.VERSIONED.finditer(text)] == [CURRENT, CURRENT]
    assert release.VERSIONED.sub("1.0.0-rc.1", text).count("1.0.0-rc.1") == 2
