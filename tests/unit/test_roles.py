"""Every role: argument_specs options are exactly its defaults' keys plus the required options, with the
same defaults; public variables carry the role's prefix; the README is the one generated from the specs."""
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
