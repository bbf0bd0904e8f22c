"""The roles' unit-name test is the modules' own check: the same pattern, the .service suffix refused."""
import pytest

from ansible_collections.inferops.sglang.plugins.module_utils import _specs
from ansible_collections.inferops.sglang.plugins.test import systemd_unit_name as plugin
from ansible_collections.inferops.sglang.plugins.test.systemd_unit_name import systemd_unit_name


@pytest.mark.parametrize("name", ["sglang-30000", "sglang", "sglang@30000", "a_b.c:d-e", "9x", "sglang@a.b:c-d_e"])
def test_names_the_modules_take(name):
    assert systemd_unit_name(name)


@pytest.mark.parametrize("name", ["sglang-30000.service", "sglang@30000.service", "", "-x", "_x", ".x", "a b", "a/b",
                                  "a@", "a@b@c", "a@b c", "sgl\nang", "sglang\n", "x@y\n", 30000, None,
                                  ["sglang"]])
def test_names_the_modules_refuse(name):
    assert not systemd_unit_name(name)


def test_one_pattern_for_roles_and_modules():
    assert plugin.TestModule().tests() == {"systemd_unit_name": systemd_unit_name}
    answers = {}
    for name in ["sglang-30000", "x@y", "x.service", "-x", "a@b@c"]:
        refused = []
        _specs.check_unit_name(name, "unit", refused.append)
        answers[name] = not refused
        assert systemd_unit_name(name) == answers[name], name
    assert list(answers.values()) == [True, True, False, False, False]
