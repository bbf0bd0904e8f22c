"""Releases the collection as a new version (make release VERSION=X.Y.Z [DATE=YYYY-MM-DD]).

    python tests/tools/release.py X.Y.Z [--date YYYY-MM-DD]

A version that is not semantic versioning, or not greater than the current one (galaxy.yml's, which is the
changelog's latest release), is refused with the rule and the value, and nothing changes. Otherwise
antsibull-changelog releases the fragments as that version (the modules, plugins and roles whose version_added is
newer than the last release are listed as new; CHANGELOG.rst is regenerated), then galaxy.yml's version and every
tarball or image name that carries the version (README.md, execution-environment.yml, awx/...) become the new one.
tests/unit/test_changelog.py and tests/unit/test_release.py check what this leaves.
"""
import argparse
import datetime
import os
import re
import subprocess
import sys
from pathlib import Path

import semantic_version
import yaml

ROOT = Path(__file__).resolve().parents[2]

# https://semver.org's own expression
SEMVER = re.compile(r"^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)"
                    r"(?:-((?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*)(?:\.(?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*))*))?"
                    r"(?:\+([0-9a-zA-Z-]+(?:\.[0-9a-zA-Z-]+)*))?$")
_VERSION = r"\d+\.\d+\.\d+(?:-[0-9A-Za-z.-]+)?(?:\+[0-9A-Za-z.-]+)?"
# The names that carry the version: the tarball ansible-galaxy builds and the execution environment's image tag.
VERSIONED = re.compile(r"(?<=inferops-sglang-)(%s)(?=\.tar\.gz)|(?<=inferops-sglang-ee:)(%s)\b" % (_VERSION, _VERSION))
# History keeps the versions it names.
HISTORY = ("changelogs/", "CHANGELOG.rst")


class Refused(Exception):
    pass


def current(root=ROOT):
    return yaml.safe_load((root / "galaxy.yml").read_text())["version"]


def releases(root=ROOT):
    return list((yaml.safe_load((root / "changelogs" / "changelog.yaml").read_text()) or {}).get("releases") or {})


def check(version, root=ROOT):
    """Refuses what cannot be the next version: not semantic versioning, or not greater than every release."""
    if not SEMVER.match(version or ""):
        raise Refused("VERSION must be semantic versioning, MAJOR.MINOR.PATCH with an optional -PRERELEASE or +BUILD "
                      "(https://semver.org): got %r" % (version,))
    new = semantic_version.Version(version)
    for what, old in [("galaxy.yml", current(root))] + [("changelogs/changelog.yaml", r) for r in releases(root)]:
        if not new > semantic_version.Version(old):
            raise Refused("VERSION must be greater than the current version %s (%s): got %s" % (old, what, version))


def versioned_files(root=ROOT):
    """Tracked text files, history left out."""
    names = subprocess.run(["git", "ls-files", "-z"], cwd=str(root), stdout=subprocess.PIPE, check=True).stdout
    for name in sorted(n for n in names.decode().split("\0") if n):
        path = root / name
        if name.startswith(HISTORY) or not path.is_file():
            continue
        try:
            yield name, path.read_text()
        except UnicodeDecodeError:
            continue


def versions_named(root=ROOT):
    """{(file, line number): version} for every tarball or image name that carries a version."""
    found = {}
    for name, text in versioned_files(root):
        for number, line in enumerate(text.splitlines(), 1):
            for m in VERSIONED.finditer(line):
                found[(name, number)] = m.group(0)
    return found


def set_version(version, root=ROOT):
    galaxy = root / "galaxy.yml"
    text, n = re.subn(r"^version: .*$", "version: %s" % version, galaxy.read_text(), count=1, flags=re.M)
    assert n == 1, "galaxy.yml has no version line"
    galaxy.write_text(text)
    for name, text in versioned_files(root):
        new = VERSIONED.sub(version, text)
        if new != text:
            (root / name).write_text(new)


def release(version, date, root=ROOT, out=sys.stdout):
    check(version, root)
    if not re.match(r"^\d{4}-\d{2}-\d{2}$", date or ""):
        raise Refused("DATE must be YYYY-MM-DD: got %r" % (date,))
    tools = os.path.dirname(sys.executable)
    # --cummulative-release: every plugin added since the last release (version_added in between), not only those
    # that name this very version; --reload-plugins: the plugin cache is generated, never trusted.
    r = subprocess.run([os.path.join(tools, "antsibull-changelog"), "release", "--version", version, "--date", date,
                        "--cummulative-release", "--reload-plugins",
                        "--ansible-doc-bin", os.path.join(tools, "ansible-doc")],
                       cwd=str(root), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True,
                       check=False)
    out.write(r.stdout)
    if r.returncode != 0 or version not in releases(root):
        raise Refused("antsibull-changelog release %s failed (rc %d); galaxy.yml is unchanged" % (version, r.returncode))
    set_version(version, root)
    out.write("released %s (%s): galaxy.yml, CHANGELOG.rst, changelogs/changelog.yaml and %d versioned names\n"
              % (version, date, len(versions_named(root))))


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("version")
    p.add_argument("--date", default=datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d"))
    args = p.parse_args(argv)
    try:
        release(args.version, args.date)
    except Refused as e:
        print("make release: %s" % e, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
