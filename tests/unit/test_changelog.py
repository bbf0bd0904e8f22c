"""The changelog against the collection: CHANGELOG.rst and changelogs/changelog.yaml name only modules, plugins and
roles that exist (or that a later release removed), every one that exists is in a release or will be in the next
(`make release` lists it from its version_added), and the version galaxy.yml builds is the latest release."""
import json
import os
import re
import subprocess
import sys

import pytest
import semantic_version
import yaml

from tests.unit.conftest import COLLECTIONS, ROOT

KINDS = ("module", "filter", "test", "role")
NEXT = "next"  # what the fragments not yet released say
RAW = re.compile(r"\b(?:RV|[MVOCIEPUL])\([^)]*\)")  # Ansible markup: fragments are reStructuredText


def contents(collections=COLLECTIONS):
    """{kind: {name: version_added}} of what ansible-doc finds in the collection (what antsibull-changelog reads)."""
    r = subprocess.run([os.path.join(os.path.dirname(sys.executable), "ansible-doc"), "--metadata-dump",
                        "--no-fail-on-errors", "inferops.sglang"], stdout=subprocess.PIPE, universal_newlines=True,
                       env=dict(os.environ, ANSIBLE_COLLECTIONS_PATH=collections,
                                ANSIBLE_COLLECTIONS_SCAN_SYS_PATH="false"), check=True)
    found = json.loads(r.stdout)["all"]
    out = {}
    for kind in KINDS:
        out[kind] = {}
        for fqcn, data in (found.get(kind) or {}).items():
            doc = (data.get("entry_points") or {}).get("main") if kind == "role" else data.get("doc")
            out[kind][fqcn[len("inferops.sglang."):]] = (doc or {}).get("version_added")
    return out


def changelog(root=ROOT):
    return yaml.safe_load((root / "changelogs" / "changelog.yaml").read_text())["releases"]


def listed(root=ROOT):
    """[(kind, name, version)] for every module, plugin and role a release lists as new."""
    out = []
    for version, rel in changelog(root).items():
        out += [("module", m["name"], version) for m in rel.get("modules", [])]
        for section in ("plugins", "objects"):
            out += [(kind, p["name"], version) for kind, ps in rel.get(section, {}).items() for p in ps]
    return out


def entries(root=ROOT):
    """[(version, section, text)]: every released entry, and every entry of a fragment (version NEXT)."""
    out = [(v, s, t) for v, rel in changelog(root).items() for s, ts in rel.get("changes", {}).items()
           for t in (ts if isinstance(ts, list) else [ts])]
    for f in sorted((root / "changelogs" / "fragments").glob("*.yml")):
        out += [(NEXT, s, t) for s, ts in (yaml.safe_load(f.read_text()) or {}).items()
                for t in (ts if isinstance(ts, list) else [ts])]
    return out


def after(release, version):
    """Whether `release` (a version, or NEXT) comes after `version`."""
    if version == NEXT or release == NEXT:
        return version != NEXT
    return semantic_version.Version(release) > semantic_version.Version(version)


def removed_after(name, version, root=ROOT):
    """A removal of `name` announced by a release after `version`, or by a fragment."""
    word = re.compile(r"(?<![\w.])%s(?![\w])" % re.escape(name))
    return [t for v, s, t in entries(root) if s in ("removed_features", "breaking_changes") and after(v, version)
            and word.search(t)]


def missing_from_the_collection(have, root=ROOT):
    """What a release lists as new and the collection (`have`, from contents()) lacks, unless a later one removed it."""
    return ["%s %s (listed in %s)" % (kind, name, version) for kind, name, version in listed(root)
            if name not in have[kind] and not removed_after(name, version, root)]


def unlisted(have, root=ROOT):
    """{"kind name": version_added} of what the collection (`have`, from contents()) has and no release lists."""
    released = set((kind, name) for kind, name, _version in listed(root))
    return dict(("%s %s" % (kind, name), added) for kind, names in have.items()
                for name, added in names.items() if (kind, name) not in released)


@pytest.fixture(scope="module")
def have():
    return contents()


def test_what_ansible_doc_finds_is_what_the_tree_holds(have):
    """The check reads what antsibull-changelog reads; it must see every module, filter, test and role there is."""
    assert set(have["module"]) == set(p.stem for p in (ROOT / "plugins" / "modules").glob("*.py") if p.stem[0] != "_")
    assert set(have["filter"]) == set(p.stem for p in (ROOT / "plugins" / "filter").glob("*.yml"))
    assert set(have["test"]) == set(p.stem for p in (ROOT / "plugins" / "test").glob("*.yml"))
    assert set(have["role"]) == set(p.name for p in (ROOT / "roles").iterdir() if (p / "meta").is_dir())


def test_the_changelog_yaml_lists_only_what_exists_or_a_later_release_removed(have):
    assert missing_from_the_collection(have) == []


def test_changelog_rst_names_only_what_exists_or_a_later_release_removed(have):
    names = set(n for kind in have.values() for n in kind) | set(p.stem for p in (ROOT / "playbooks").glob("*.yml"))
    rst = (ROOT / "CHANGELOG.rst").read_text()
    named = set(re.findall(r"\binferops\.sglang\.(\w+)", rst))
    assert named
    assert sorted(n for n in named - names if not removed_after(n, "0.0.0")) == []


def test_every_plugin_and_role_is_in_a_release_or_the_next_lists_it(have):
    """Whatever no release lists yet must carry a version_added newer than the latest release: `make release` lists
    what was added since the last one and nothing older, so an older or missing version_added is never listed.
    (After a release nothing is unlisted: tests/unit/test_release.py releases a copy and checks it.)"""
    latest = max(semantic_version.Version(v) for v in changelog())
    never = dict((what, added) for what, added in unlisted(have).items()
                 if not added or semantic_version.Version(added) <= latest)
    assert never == {}, "no release lists these, and their version_added is not newer than %s" % latest


def test_galaxy_yml_builds_the_latest_release():
    version = yaml.safe_load((ROOT / "galaxy.yml").read_text())["version"]
    assert version == str(max(semantic_version.Version(v) for v in changelog()))


def test_entries_are_restructuredtext_without_ansible_markup():
    """antsibull-changelog renders fragments as reStructuredText: C(x) would stay C(x); ``x`` is a literal."""
    raw = [(v, t) for v, _section, t in entries() if RAW.search(re.sub(r"``.*?``", "", str(t)))]
    assert raw == []


def test_the_checks_find_what_they_look_for():
    assert RAW.search("a C(status) entry point") and not RAW.search(re.sub(r"``.*?``", "", "no raw ``M()``"))
    assert removed_after("cutover_durations", "0.1.0") and not removed_after("argv_option", "0.1.0")
    assert after("0.2.0", "0.1.0") and after(NEXT, "0.1.0") and not after("0.1.0", NEXT) and not after(NEXT, NEXT)
