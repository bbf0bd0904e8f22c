"""Test-bed container names are never all hex. podman 4.3 resolves a name it cannot find as the prefix of a container
ID (IDs are lowercase hex): a lookup of a name such as `f6` or `deb12` before that container exists - molecule's
destroy (`podman container exists NAME && podman rm -f NAME`), the create's inspect - can find another lane's
container whose ID starts with those characters, and remove it. A name with a letter outside a-f never matches."""
import re

import yaml

from tests.unit.conftest import ROOT

HEX = re.compile(r"^[0-9a-f]+$")


def platform_names():
    """Each scenario's hosts, and the shared base's (.config/molecule/config.yml) that scenarios without their own use."""
    for path in [ROOT / ".config" / "molecule" / "config.yml"] + sorted(ROOT.glob("molecule/*/molecule.yml")):
        scenario = yaml.safe_load(path.read_text()) or {}
        for platform in scenario.get("platforms") or []:
            yield "%s: %s" % (path.parent.name, platform["name"])


def script_names():
    """Containers the test bed's scripts name themselves (`--name NAME`)."""
    for path in sorted(list(ROOT.glob("tests/**/*.sh")) + [ROOT / "Makefile"]):
        for name in re.findall(r"--name[ =]([^\s\"']+)", path.read_text()):
            yield "%s: %s" % (path.relative_to(ROOT), name)


def test_every_test_bed_container_name_is_not_an_id_prefix():
    names = list(platform_names()) + list(script_names())
    assert len(names) > 40, names  # every scenario's hosts were read
    hexed = [n for n in names if HEX.match(n.rsplit(": ", 1)[1])]
    assert not hexed, "all-hex container names (podman also reads them as container-ID prefixes): %s" % hexed


def test_the_rule_finds_the_names_that_removed_other_lanes_hosts():
    assert all(HEX.match(n) for n in ("f1", "f5b", "f6c", "deb12", "fa1"))
    assert not any(HEX.match(n) for n in ("fault1", "fleet6", "debian12", "inferops-bridge", "instance"))
