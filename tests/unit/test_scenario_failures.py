"""tests/tools/scenario_failures.py: what the end of a CI log says of a failed scenario."""
import json

from tests.tools.scenario_failures import failures

ASYNC_FAILED = {"ansible_job_id": "j1", "changed": True, "finished": 1, "msg": "non-zero return code", "rc": 1,
                "stderr": "Traceback (most recent call last):\n  File \"kill_during_switch.py\", line 60\n"
                          "ProcessLookupError: [Errno 3] No such process",
                "stdout": '{"runs": []}'}


def test_a_pretty_printed_result_gives_its_message_rc_and_the_end_of_its_stderr():
    log = "\n".join(["TASK [Wait for h2] ***", "FAILED - RETRYING: [localhost]: Wait for h2 (449 retries left).",
                     "fatal: [localhost]: FAILED! => {"]
                    + json.dumps(ASYNC_FAILED, indent=4).splitlines()[1:] + ["", "PLAY RECAP ***"])
    said = failures(log)
    assert said[0] == "fatal: [localhost]: non-zero return code"
    assert "    rc: 1" in said
    assert "    stderr| ProcessLookupError: [Errno 3] No such process" in said
    assert '    stdout| {"runs": []}' in said
    assert not [line for line in said if "RETRYING" in line]


def test_a_one_line_result_an_assertion_and_pytest_failures_are_kept():
    log = "\n".join([
        "CRITICAL 'molecule/default/molecule.yml' glob failed.  Exiting.",
        'fatal: [fault9]: FAILED! => {"assertion": "x == 1", "changed": false, "evaluated_to": false, "msg": "no"}',
        "failed: [h1] (item=1) => not json",
        "E       assert 1 == 0",
        "FAILED test_default.py::test_x - assert 1 == 0",
        "CRITICAL Ansible return code was 2"])
    assert failures(log) == ["fatal: [fault9]: no", '    assertion: "x == 1"', "failed: [h1] (item=1): not json",
                             "E       assert 1 == 0", "FAILED test_default.py::test_x - assert 1 == 0",
                             "CRITICAL Ansible return code was 2"]
