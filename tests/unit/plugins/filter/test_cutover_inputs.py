"""cutover_ports as the playbooks take it: an int or a mapping an entry, each server's port and unit once, every
problem naming its entries; the input check's lines for what a person types."""
from ansible_collections.inferops.sglang.plugins.filter.cutover_inputs import cutover_input_problems, cutover_servers


def test_entries_are_ports_or_mappings_with_the_unit_name_filled_in():
    got = cutover_servers([30000, "30001", {"port": 30002, "unit_name": "sglang-b", "extra_args": ["--tp", "2"]}])
    assert got == {"problems": [], "servers": [
        {"port": 30000, "unit_name": "sglang-30000"}, {"port": 30001, "unit_name": "sglang-30001"},
        {"port": 30002, "unit_name": "sglang-b", "extra_args": ["--tp", "2"]}]}
    assert cutover_servers(None) == cutover_servers([]) == {"servers": [], "problems": []}


def test_a_duplicate_port_or_unit_is_refused_naming_the_entries():
    got = cutover_servers([30000, {"port": 30001, "unit_name": "sglang-30000"}, {"port": "30000", "unit_name": "c"}])
    assert got["problems"] == [
        "cutover_ports[0] and cutover_ports[2] have the same port 30000: each server has its own port and its own unit",
        "cutover_ports[0] and cutover_ports[1] have the same unit_name 'sglang-30000': each server has its own port and "
        "its own unit"]


def test_a_bad_entry_is_named():
    got = cutover_servers(["x", {"unit_name": "a"}, {"port": "p1"}, {"port": 1, "unit": "u"}, {"port": 2, "unit_name": "a/b"}])
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
    assert cutover_input_problems(good) == []
    assert cutover_input_problems(dict(good, cutover_extra_args="--tp 2 --chat-template 'a b'")) == [
        'cutover_extra_args is a string ("--tp 2 --chat-template \'a b\'"): give a list, one argument an element: '
        '-e \'{"cutover_extra_args": ["--tp", "2", "--chat-template", "a b"]}\' (JSON), or in YAML one \'- \' line an '
        'argument']
