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


def test_split_secrets_takes_argparse_prefixes_of_the_flags():
    out = split_secrets(["--api-k", "sk-1", "--admin-api=adm-2", "--hf-tok", "hf-3", "--port", "1"],
                        ["--api-key", "--admin-api-key", "--hf-token"])
    assert out == {"secret_vars": {1: "INFEROPS_API_KEY", 2: "INFEROPS_ADMIN_API_KEY", 4: "INFEROPS_HF_TOKEN"},
                   "env": {"INFEROPS_API_KEY": "sk-1", "INFEROPS_ADMIN_API_KEY": "--admin-api=adm-2",
                           "INFEROPS_HF_TOKEN": "hf-3"}}


def test_a_units_value_doubles_percent_and_refuses_what_ends_a_line():
    from ansible_collections.inferops.sglang.plugins.filter.systemd import systemd_value
    assert systemd_value("/srv/my models/100%") == "/srv/my models/100%%" and systemd_value(30) == "30"
    for bad in ("a\nExecStartPre=+/x", "a\rb", "a\x00", "/srv/w\\", True, None):
        with pytest.raises(AnsibleFilterError):
            systemd_value(bad)


def test_an_executables_path_is_written_as_it_is_or_quoted():
    from ansible_collections.inferops.sglang.plugins.filter.systemd import systemd_exec_path
    assert systemd_exec_path("/opt/sglang/venv/bin/python") == "/opt/sglang/venv/bin/python"
    assert systemd_exec_path("/opt/v/bin/python3.11", "@") == "@/opt/v/bin/python3.11"
    assert systemd_exec_path("/srv/my venv/bin/python", "@") == '"@/srv/my venv/bin/python"'
    assert systemd_exec_path("/srv/pc%d/bin/python") == '"/srv/pc%%d/bin/python"'
    for bad in ("python3", "/srv/$HOME/python", "/srv/a\"b", "/srv/a\\b", "/srv/x\nExecStartPre=+/e", "/srv/x ", 1):
        with pytest.raises(AnsibleFilterError):
            systemd_exec_path(bad)


GOOD = dict(name="sglang-30000", description="SGLang", command=["/opt/v/bin/python", "-m", "sglang.launch_server"],
            argv0="", working_directory="/srv/w", user="svc", group="svc", environment={"A": "1"},
            limits={"LimitNOFILE": "1048576", "LimitMEMLOCK": "infinity"}, requires_mounts_for=["/opt/v"],
            timeout_start_sec=900, timeout_stop_sec="120", restart_sec=10, start_limit_interval_sec=3600,
            start_limit_burst=3, kill_mode="mixed", restart="on-failure", secret_flags=["--api-key"],
            readiness_gate=True, ready_host="127.0.0.1", ready_port="30000")


@pytest.mark.parametrize("change, problem", [
    (dict(working_directory="/srv/w\nExecStartPre=+/e"), "systemd_unit_working_directory '/srv/w\\nExecStartPre=+/e':"
                                                         " holds a control character (\\n)"),
    (dict(ready_host="127.0.0.1\nExecStartPost=+/e"), "the command's --host '127.0.0.1\\nExecStartPost=+/e'"),
    (dict(ready_host="-oProxyCommand=x"), "the command's --host '-oProxyCommand=x'"),
    (dict(ready_port="30000x"), "the command's --port '30000x'"),
    (dict(ready_port=70000), "the command's --port 70000"),
    (dict(requires_mounts_for=["/a b"]), "systemd_unit_requires_mounts_for '/a b': holds a space"),
    (dict(user="svc\n"), "systemd_unit_user 'svc\\n'"),
    (dict(group="a b"), "systemd_unit_group 'a b': a user or group name"),
    (dict(environment={"A": 1}), "systemd_unit_environment {'A': 1}"),
    (dict(timeout_stop_sec="2min"), "systemd_unit_timeout_stop_sec '2min'"),
    (dict(kill_mode="mixed\n"), "systemd_unit_kill_mode 'mixed\\n'"),
    (dict(command="/usr/bin/python3 -c pass"), "systemd_unit_command '/usr/bin/python3 -c pass': an argv list"),
    (dict(name="x\ny"), "systemd_unit_name 'x\\ny'"),
])
def test_every_value_of_the_unit_is_checked_naming_the_rule_and_the_value(change, problem):
    from ansible_collections.inferops.sglang.plugins.filter.systemd import systemd_unit_problems
    assert systemd_unit_problems(GOOD) == []
    assert systemd_unit_problems(dict(GOOD, readiness_gate=False, ready_host="x\ny")) == [], "no gate, no host"
    got = systemd_unit_problems(dict(GOOD, **change))
    assert len(got) == 1 and got[0].startswith(problem), got


@pytest.mark.parametrize("host", ["127.0.0.1", "::1", "[::1]", "gpu-01.example.com", "localhost"])
def test_the_gates_host_is_an_address_or_a_name(host):
    from ansible_collections.inferops.sglang.plugins.filter.systemd import systemd_unit_problems
    assert systemd_unit_problems(dict(GOOD, ready_host=host)) == []


def test_split_secrets_always_takes_sglangs_own_secret_options():
    """An operator's list without it cannot leave --ssl-keyfile-password in ExecStart; --ssl-keyfile, a path that
    is also a prefix of it, is its own option and stays."""
    argv = ["--ssl-keyfile", "/k.pem", "--ssl-keyfile-password", "pw-1", "--admin-api-key=adm-2"]
    assert split_secrets(argv, ["--my-flag"]) == {
        "secret_vars": {3: "INFEROPS_SSL_KEYFILE_PASSWORD", 4: "INFEROPS_ADMIN_API_KEY"},
        "env": {"INFEROPS_SSL_KEYFILE_PASSWORD": "pw-1", "INFEROPS_ADMIN_API_KEY": "--admin-api-key=adm-2"}}
