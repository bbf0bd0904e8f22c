"""The option groups several modules take, written once, agree with the doc fragments that document them; the checks
of a port and a unit name that more than one module makes."""
import pytest
import yaml

from ansible_collections.inferops.sglang.plugins.doc_fragments import selection, server, stop, unit_files, wait
from ansible_collections.inferops.sglang.plugins.module_utils import _specs


class Failed(Exception):
    pass


def fail(msg):
    raise Failed(msg)


def options(text):
    return yaml.safe_load(text)["options"]


@pytest.mark.parametrize("port", [1, 30000, 65535])
def test_a_port_a_server_can_listen_on_passes(port):
    assert _specs.check_port(port, fail) == port


@pytest.mark.parametrize("port", [0, -1, 65536])
def test_another_port_fails_saying_the_range(port):
    with pytest.raises(Failed) as e:
        _specs.check_port(port, fail)
    assert str(e.value) == "port must be 1-65535, not %d" % port


@pytest.mark.parametrize("name", ["sglang", "sglang-30000", "sglang_a.b:c", "sglang@30000", "9sglang"])
def test_a_services_name_passes(name):
    assert _specs.check_unit_name(name, "unit", fail) == name


@pytest.mark.parametrize("name", ["sglang.service", "-sglang", "sglang 30000", "", "sglang@", "sglang/x", "@x"])
def test_another_name_fails_naming_the_option(name):
    for option in ("unit", "name"):
        with pytest.raises(Failed) as e:
            _specs.check_unit_name(name, option, fail)
        assert str(e.value) == ("%s %r: give the service's name without .service, of letters, digits and _ . : -"
                                % (option, name))


def agree(spec, docs):
    """spec and the documented options have the same names, types, elements, defaults and required."""
    assert sorted(spec) == sorted(docs)
    for name, s in spec.items():
        d = docs[name]
        assert (s.get("type"), s.get("elements"), s.get("default"), bool(s.get("required"))) == \
            (d.get("type"), d.get("elements"), d.get("default"), bool(d.get("required"))), name


@pytest.mark.parametrize("spec,fragment", [
    (_specs.UNIT_FILES_SPEC, unit_files.ModuleDocFragment.DOCUMENTATION),
    (_specs.WAIT_SPEC, wait.ModuleDocFragment.DOCUMENTATION),
    (_specs.PORT_SPEC, server.ModuleDocFragment.DOCUMENTATION),
    (_specs.REDACT_SPEC, server.ModuleDocFragment.REDACT),
    (_specs.DEVICES_SPEC, server.ModuleDocFragment.DEVICES),
    (_specs.SELECTION_SPEC, selection.ModuleDocFragment.DOCUMENTATION),
    (_specs.STOP_SPEC, stop.ModuleDocFragment.DOCUMENTATION),
])
def test_each_group_is_documented_as_it_is_specified(spec, fragment):
    agree(spec, options(fragment))


def test_sglang_switchs_install_and_wait_are_documented_with_the_same_text():
    install = options(unit_files.ModuleDocFragment.SUBOPTIONS)
    assert list(install) == ["install"]
    assert install["install"]["suboptions"] == options(unit_files.ModuleDocFragment.DOCUMENTATION)
    waited = options(wait.ModuleDocFragment.SUBOPTIONS)
    assert list(waited) == ["wait"]
    assert waited["wait"]["suboptions"] == dict(options(wait.ModuleDocFragment.DOCUMENTATION),
                                                **options(wait.ModuleDocFragment.SWITCH))
