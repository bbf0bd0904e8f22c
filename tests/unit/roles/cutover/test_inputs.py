"""The cutover role's inputs, as a person types them in an inventory, with -e or in an AWX survey (strings where
those give strings): each bad one is refused before anything is touched, by a message that names the variable, the
rule and the value, never a raw Jinja error. One ansible-playbook run on this machine, a play a case (its vars are
the inputs); every case stops at the checks, before the discovery."""
import json
import os
import subprocess
import sys

import pytest

from tests.unit.conftest import COLLECTIONS

PLAY = """
- name: Case {id}
  hosts: localhost
  connection: local
  gather_facts: false
  vars: {vars}
  tasks:
    - name: The role, with the case's inputs
      block:
        - name: The cutover role
          ansible.builtin.include_role:
            name: inferops.sglang.cutover
        - name: Accepted
          ansible.builtin.set_fact:
            outcomes: "{{{{ outcomes | default({{}}) | combine({{'{id}': 'ACCEPTED'}}) }}}}"
      rescue:
        - name: Refused
          ansible.builtin.set_fact:
            outcomes: "{{{{ outcomes | default({{}}) | combine({{'{id}': ansible_failed_result.msg}}) }}}}"
"""
LAST = """
- name: What each case gave
  hosts: localhost
  connection: local
  gather_facts: false
  tasks:
    - name: Written out
      ansible.builtin.copy:
        dest: {out}
        content: "{{{{ outcomes | to_json }}}}"
        mode: "0600"
"""
PY = "/opt/sglang/venv/bin/python"
# id: (the inputs, what the message says). The argument specs answer for types and choices (Ansible's own words,
# which name the variable); the role's check for the rest.
CASES = {
    "port_word": ({"cutover_port": "abc"}, "cutover_port"),
    "port_high": ({"cutover_port": "70000"}, "cutover_port 70000: a port is 1-65535"),
    "port_zero": ({"cutover_port": "0"}, "cutover_port 0: a port is 1-65535"),
    "port_negative": ({"cutover_port": "-1"}, "cutover_port -1: a port is 1-65535"),
    "unit_slash": ({"cutover_unit_name": "sglang/30000"},
                   "cutover_unit_name 'sglang/30000': a service's name has only letters, digits and _ . : -"),
    "unit_service": ({"cutover_unit_name": "sglang-a.service"},
                     "cutover_unit_name 'sglang-a.service': give the service's name without .service ('sglang-a')"),
    "unit_blank": ({"cutover_unit_name": ""}, 'cutover_unit_name is blank ("" or null)'),
    "unit_dash": ({"cutover_unit_name": "-x"}, "cutover_unit_name '-x': a service's name has only letters"),
    "unit_space": ({"cutover_unit_name": "my server"}, "cutover_unit_name 'my server': a service's name has only"),
    "state_dir_blank": ({"cutover_state_dir": ""}, 'cutover_state_dir is blank ("" or null)'),
    "extra_args_string": ({"cutover_extra_args": "--tp 2"},
                          "cutover_extra_args is a string ('--tp 2'): give a list, one argument an element: "
                          '-e \'{"cutover_extra_args": ["--tp", "2"]}\' (JSON)'),
    "extra_args_quoted": ({"cutover_extra_args": "--chat-template 'a b'"},
                          '{"cutover_extra_args": ["--chat-template", "a b"]}'),
    "extra_args_number": ({"cutover_extra_args": ["--tp", 2]}, 'cutover_extra_args[1] is 2, not a string: quote it ("2")'),
    "command_string": ({"cutover_command": PY + " -m sglang.launch_server"},
                       'cutover_command is a string (\'%s -m sglang.launch_server\'): give a list, one argument an '
                       'element: -e \'{"cutover_command": ["%s", "-m", "sglang.launch_server"]}\'' % (PY, PY)),
    "command_relative": ({"cutover_command": ["python", "-m", "sglang.launch_server"]},
                         "cutover_command[0] 'python': the command starts with an absolute path"),
    "port_in_args": ({"cutover_port": "30000", "cutover_extra_args": ["--port", "30001"]},
                     "--port 30001 in the command or the extra args: it must equal cutover_port (30000)"),
    "port_in_command": ({"cutover_port": "30002", "cutover_command": [PY, "-m", "sglang.launch_server", "--port=30000"]},
                        "--port 30000 in the command or the extra args: it must equal cutover_port (30002)"),
    "env_number": ({"cutover_environment": {"NCCL_DEBUG": 1}},
                   'cutover_environment NCCL_DEBUG is 1, not a string: quote it ("1")'),
    "env_name": ({"cutover_environment": {"1BAD": "x"}},
                 "cutover_environment name '1BAD': letters, digits and _, not starting with a digit"),
    "env_string": ({"cutover_environment": "NCCL_DEBUG=INFO"},
                   "cutover_environment 'NCCL_DEBUG=INFO': a mapping of names to strings"),
    "drain_negative": ({"cutover_drain_sec": "-1"}, "cutover_drain_sec -1: a whole number >= 0"),
    "timeout_zero": ({"cutover_timeout_start_sec": "0"}, "cutover_timeout_start_sec 0: a whole number >= 1"),
    "prewarm_negative": ({"cutover_prewarm_budget_sec": "-5"}, "cutover_prewarm_budget_sec -5: a whole number >= 0"),
    "slowdown_negative": ({"cutover_bench_max_slowdown_pct": "-3"},
                          "cutover_bench_max_slowdown_pct -3: a whole number >= 0"),
    "history_zero": ({"cutover_record_history": "0"}, "cutover_record_history 0: a whole number >= 1"),
    "user_null": ({"cutover_user": None}, 'cutover_user is blank ("" or null)'),
    "hook_null": ({"cutover_hook_before_stop": None}, 'cutover_hook_before_stop is blank ("" or null)'),
    "mode_choice": ({"cutover_mode": "swap"}, "cutover_mode"),
    "units_choice": ({"cutover_existing_units": "keep"}, "cutover_existing_units"),
    "group_unknown": ({"cutover_multinode_group": "kimi"},
                      "cutover_multinode_group 'kimi': no such inventory group (the group of the hosts that run the "
                      "ranks of one multi-node server)"),
    "group_null": ({"cutover_multinode_group": None}, 'cutover_multinode_group is blank ("" or null)'),
    "group_adopted": ({"cutover_multinode_group": "ungrouped", "cutover_mode": "adopt"},
                      "cutover_multinode_group 'ungrouped' with cutover_mode adopt: a multi-node server is switched, "
                      "rank by rank, never adopted in place"),
    "two_at_once": ({"cutover_port": "70000", "cutover_unit_name": "a/b"},
                    "cutover_port 70000: a port is 1-65535; cutover_unit_name 'a/b': a service's name"),
}


@pytest.fixture(scope="module")
def refused(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("inputs")
    out = tmp / "out.json"
    plays = "".join(PLAY.format(id=k, vars=json.dumps(dict(v[0], cutover_state_dir=v[0].get(
        "cutover_state_dir", str(tmp / "state"))))) for k, v in CASES.items())
    (tmp / "play.yml").write_text("---" + plays + LAST.format(out=json.dumps(str(out))))
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=COLLECTIONS, ANSIBLE_LOCALHOST_WARNING="false",
               ANSIBLE_INVENTORY_UNPARSED_WARNING="false", ANSIBLE_NOCOLOR="1")
    p = subprocess.run([os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), str(tmp / "play.yml")],
                       env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True,
                       check=False, cwd=str(tmp), timeout=600)
    assert p.returncode == 0, p.stdout[-4000:]
    result = json.loads(out.read_text())
    assert not (tmp / "state").exists()  # nothing was touched
    return result


def test_the_table_has_at_least_twenty_inputs():
    assert len(CASES) >= 20


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_bad_input_is_refused_naming_the_rule_and_the_value(refused, case):
    msg = refused[case]
    assert msg != "ACCEPTED"
    assert CASES[case][1] in msg, msg
    for raw in ("Error rendering", "template error", "_AnsibleTagged", "can only concatenate", "is undefined",
                "Traceback"):
        assert raw not in msg, msg
