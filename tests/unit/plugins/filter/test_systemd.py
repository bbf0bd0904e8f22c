"""The quoting filters. The end-to-end proof (what reaches /proc/PID/cmdline and environ under a real
systemd) is the systemd_unit scenario; these pin the rules."""
import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.inferops.sglang.plugins.filter.systemd import (
    argv_option, split_secrets, systemd_env_file_value, systemd_exec_args)


def test_exec_args_quote_escape_and_double_specifiers():
    assert systemd_exec_args(["a b", 'q"x', "b\\s", "100%", "%h", "$HOME", ";", "l1\nl2", "t\tt"]) == \
        '"a b" "q\\"x" "b\\\\s" "100%%" "%%h" "$$HOME" \\; "l1\\nl2" "t\\tt"'


def test_exec_args_secret_references():
    assert systemd_exec_args(["--api-key", "sk"], {1: "INFEROPS_API_KEY"}) == '"--api-key" ${INFEROPS_API_KEY}'
    assert systemd_exec_args(["x"], {"0": "V"}) == "${V}"


@pytest.mark.parametrize("bad", [[], "a string", [1]])
def test_exec_args_bad_input(bad):
    with pytest.raises(AnsibleFilterError):
        systemd_exec_args(bad)


def test_env_file_value():
    assert systemd_env_file_value('a "b" $c `d` \\e\nf') == '"a \\"b\\" \\$c \\`d\\` \\\\e\nf"'
    with pytest.raises(AnsibleFilterError):
        systemd_env_file_value(1)


def test_split_secrets():
    argv = ["-m", "sglang.launch_server", "--api-key", "sk-1", "--hf-token=hf_x", "--port", "30000"]
    out = split_secrets(argv, ["--api-key", "--hf-token"])
    assert out == {"secret_vars": {3: "INFEROPS_API_KEY", 4: "INFEROPS_HF_TOKEN"},
                   "env": {"INFEROPS_API_KEY": "sk-1", "INFEROPS_HF_TOKEN": "--hf-token=hf_x"}}


def test_argv_option():
    assert argv_option(["--port", "1", "--port=2"], "--port") == "2"
    assert argv_option(["--host", "0.0.0.0"], "--port", 30000) == 30000


@pytest.mark.parametrize("executable, python", [
    ("/opt/sglang/venv/bin/python", "/opt/sglang/venv/bin/python"),
    ("/opt/sglang/venv/bin/python3.9", "/opt/sglang/venv/bin/python3.9"),
    ("/root/.pyenv/versions/3.12.1/bin/python3", "/root/.pyenv/versions/3.12.1/bin/python3"),
    ("/opt/sglang/venv/bin/sglang", "/opt/sglang/venv/bin/python3"),  # a console script: the venv's python
    ("/home/ml/env/bin/keep-serving.sh", "/home/ml/env/bin/python3"),
])
def test_the_gate_runs_with_the_units_own_interpreter(executable, python):
    from ansible_collections.inferops.sglang.plugins.filter.systemd import gate_python
    assert gate_python(executable) == python


@pytest.mark.parametrize("bad", ["python3", "", None, ["/usr/bin/python3"]])
def test_the_gate_interpreter_wants_an_absolute_executable(bad):
    from ansible_collections.inferops.sglang.plugins.filter.systemd import gate_python
    with pytest.raises(AnsibleFilterError):
        gate_python(bad)
