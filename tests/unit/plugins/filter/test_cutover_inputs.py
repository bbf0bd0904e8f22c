"""The inputs stage (plugins/filter/cutover_inputs.py): cutover_ports as the playbooks take it (an int or a mapping an
entry, each server's port and unit once, every problem naming its entries); the input check's lines for what a person
types; the group's inputs; and the one mapping the stage's filter gives of them."""
import pytest

from ansible_collections.inferops.sglang.plugins.filter.cutover_inputs import (
    cutover_inputs, group_input_problems, input_problems, servers_of)


def test_entries_are_ports_or_mappings_with_the_unit_name_filled_in():
    got = servers_of([30000, "30001", {"port": 30002, "unit_name": "sglang-b", "extra_args": ["--tp", "2"]}])
    assert got == {"problems": [], "servers": [
        {"port": 30000, "unit_name": "sglang-30000"}, {"port": 30001, "unit_name": "sglang-30001"},
        {"port": 30002, "unit_name": "sglang-b", "extra_args": ["--tp", "2"]}]}
    assert servers_of(None) == servers_of([]) == {"servers": [], "problems": []}


def test_a_duplicate_port_or_unit_is_refused_naming_the_entries():
    got = servers_of([30000, {"port": 30001, "unit_name": "sglang-30000"}, {"port": "30000", "unit_name": "c"}])
    assert got["problems"] == [
        "cutover_ports[0] and cutover_ports[2] have the same port 30000: each server has its own port and its own unit",
        "cutover_ports[0] and cutover_ports[1] have the same unit_name 'sglang-30000': each server has its own port and "
        "its own unit"]


def test_a_bad_entry_is_named():
    got = servers_of(["x", {"unit_name": "a"}, {"port": "p1"}, {"port": 1, "unit": "u"}, {"port": 2, "unit_name": "a/b"}])
    assert got["problems"] == [
        "cutover_ports[0] 'x': an entry is a port or a mapping with port (and optionally unit_name, command, extra_args,"
        " environment, working_directory, user, group, gpus)",
        "cutover_ports[1] {\"unit_name\": \"a\"} has no port",
        "cutover_ports[2].port 'p1': a port is a whole number, 1-65535",
        "cutover_ports[3] has unit: an entry's keys are port, unit_name, command, extra_args, environment, "
        "working_directory, user, group, gpus",
        "cutover_ports[4].unit_name 'a/b': a service's name has only letters, digits and _ . : - (and an optional "
        "@instance), and starts with a letter or digit"]
    assert [s["port"] for s in got["servers"]] == [1, 2]


def test_good_inputs_have_no_problem_and_a_string_of_arguments_is_shown_split():
    good = {"cutover_port": "30000", "cutover_unit_name": "sglang-30000", "cutover_state_dir": "/var/lib/x",
            "cutover_command": ["/v/bin/python", "-m", "sglang.launch_server", "--port", "30000"],
            "cutover_extra_args": [], "cutover_environment": {"A": "1"}, "cutover_drain_sec": 0, "cutover_user": ""}
    assert input_problems(good) == []
    assert input_problems(dict(good, cutover_extra_args="--tp 2 --chat-template 'a b'")) == [
        'cutover_extra_args is a string ("--tp 2 --chat-template \'a b\'"): give a list, one argument an element: '
        '-e \'{"cutover_extra_args": ["--tp", "2", "--chat-template", "a b"]}\' (JSON), or in YAML one \'- \' line an '
        'argument']


GROUPS = {"all": ["a", "b", "c"], "kimi": ["a", "b"], "solo": ["a"]}


@pytest.mark.parametrize("group, host, batch, given, says", [
    ("kimi", "a", ["a", "b", "c"], {"cutover_mode": "switch", "cutover_ports": []}, []),
    ("", "a", ["a"], {"cutover_mode": "adopt", "cutover_ports": [30000]}, []),
    ("k", "a", ["a"], {}, ["cutover_multinode_group 'k': no such inventory group"]),
    ("kimi", "c", ["a", "b", "c"], {}, ["cutover_multinode_group 'kimi': c is not in that inventory group"]),
    ("solo", "a", ["a"], {}, ["cutover_multinode_group 'solo': the group holds 1 host; a multi-node server runs on two"]),
    ("kimi", "a", ["a", "c"], {}, ["cutover_multinode_group 'kimi': b is not in this run's batch (--limit, "
                                   "cutover_hosts or cutover_serial left them out): every rank's host is switched at once"]),
    ("kimi", "a", ["a", "b"], {"cutover_mode": "adopt"},
     ["cutover_multinode_group 'kimi' with cutover_mode adopt: a multi-node server is switched, rank by rank, never"]),
    ("kimi", "a", ["a", "b"], {"cutover_ports": [30000, 30001]},
     ["cutover_multinode_group 'kimi' with cutover_ports: a multi-node server is one port, cutover_port"]),
    (["kimi"], "a", ["a"], {}, ['cutover_multinode_group ["kimi"]: the name of an inventory group']),
])
def test_the_group_s_inputs(group, host, batch, given, says):
    got = group_input_problems(group, host, GROUPS, batch, given)
    assert len(got) == len(says) and all(g.startswith(s) for g, s in zip(got, says)), got


def test_the_stage_s_mapping_says_each_rule_of_the_inputs_given_and_the_servers():
    got = cutover_inputs({"cutover_port": "70000", "cutover_multinode_group": "k", "cutover_mode": "switch",
                          "cutover_ports": [30000, 30000]}, "a", GROUPS, ["a"])
    assert got["problems"] == ["cutover_port 70000: a port is 1-65535",
                               "cutover_multinode_group 'k': no such inventory group (the group of the hosts that run "
                               "the ranks of one multi-node server)"]
    assert got["servers"] == [{"port": 30000, "unit_name": "sglang-30000"}] * 2
    assert got["server_problems"] == servers_of([30000, 30000])["problems"] != []
    assert cutover_inputs({"cutover_ports": [30001]}) == {"problems": [], "server_problems": [],
                                                          "servers": [{"port": 30001, "unit_name": "sglang-30001"}]}
    assert cutover_inputs({}) == {"problems": [], "servers": [], "server_problems": []}, "only the inputs given"


@pytest.mark.parametrize("inputs, said", [
    ({"cutover_weight_cache": True, "cutover_mode": "adopt"},
     "cutover_weight_cache with cutover_mode 'adopt': the weight cache daemon's unit is installed by a switch"),
    ({"cutover_weight_cache": True, "cutover_multinode_group": "ranks"},
     "cutover_weight_cache with cutover_multinode_group 'ranks': the weight cache runs for a server on one host"),
])
def test_the_weight_cache_is_refused_where_no_switch_or_host_of_its_own_installs_it(inputs, said):
    assert [x for x in input_problems(inputs) if x.startswith(said)]
    assert input_problems(dict(inputs, cutover_weight_cache=False)) == []
