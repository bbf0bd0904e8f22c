"""The installed units, read on the host: files, /proc of the started processes, stops and crashes."""
import json
import os
import time

import yaml

SCENARIO = os.environ.get("MOLECULE_SCENARIO_DIRECTORY", os.path.dirname(os.path.dirname(__file__)))
V = yaml.safe_load(open(os.path.join(SCENARIO, "vars", "inputs.yml")))


def show(host, unit, *props):
    out = host.check_output("systemctl show %s --property=%s" % (unit, ",".join(props)))
    return dict(line.split("=", 1) for line in out.splitlines())


def argv(host, pid):
    return host.check_output("cat /proc/%s/cmdline | base64 -w0" % pid)


def decode_nul(b64):
    import base64
    return base64.b64decode(b64).split(b"\0")[:-1]


def environ(host, pid):
    return dict(x.split(b"=", 1) for x in decode_nul(host.check_output("base64 -w0 /proc/%s/environ" % pid)))


def wait(cond, timeout=60):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if cond():
            return True
        time.sleep(0.5)
    raise AssertionError("not within %d s" % timeout)


def test_files_and_modes(host):
    unit = host.file("/etc/systemd/system/sglang.service")
    env = host.file("/etc/inferops/sglang/sglang.env")
    assert (unit.mode, unit.user, unit.group) == (0o644, "root", "root")
    assert (env.mode, env.user, env.group) == (0o600, "root", "root")
    assert host.file("/etc/inferops/sglang").mode == 0o700
    assert "sk-unit-secret" not in unit.content_string
    assert '"--api-key" ${INFEROPS_API_KEY}' in unit.content_string
    assert 'INFEROPS_API_KEY="sk-unit-secret"' in env.content_string


def test_a_daemon_the_host_lacks_is_not_wanted(host):
    unit = host.file("/etc/systemd/system/sglang.service").content_string
    assert "Wants=network-online.target\n" in unit and "nvidia-persistenced" not in unit


def test_unit_settings(host):
    p = show(host, "sglang", "KillMode", "TimeoutStartUSec", "Type", "Restart", "StartLimitIntervalUSec",
             "StartLimitBurst", "LimitMEMLOCK", "LimitCORE", "NoNewPrivileges", "UnitFileState", "RequiresMountsFor",
             "SuccessExitStatus")
    assert p["KillMode"] == "mixed" and p["Type"] == "exec" and p["Restart"] == "on-failure"
    assert p["TimeoutStartUSec"] == "15min" and p["StartLimitIntervalUSec"] == "1h" and p["StartLimitBurst"] == "3"
    assert p["LimitMEMLOCK"] == "infinity" and p["LimitCORE"] == "0" and p["NoNewPrivileges"] == "yes"
    assert p["UnitFileState"] == "enabled" and "/opt/sglang" in p["RequiresMountsFor"]
    assert "KILL" in p["SuccessExitStatus"]


def test_active_means_serving(host):
    assert host.service("sglang").is_running
    assert host.check_output("python3 -c \"import urllib.request as u; print(u.urlopen('http://127.0.0.1:30000/ready').status)\"") == "200"


def test_server_argv_and_secret_reach_the_process(host):
    pid = show(host, "sglang", "MainPID")["MainPID"]
    assert [a.decode() for a in decode_nul(argv(host, pid))] == V["sglang_command"]
    assert environ(host, pid)[b"SGLANG_DOUBLE_LOAD_SECONDS"] == b"3"


def test_every_argv_element_and_env_value_verbatim(host):
    pid = show(host, "verbatim", "MainPID")["MainPID"]
    got = [a.decode() for a in decode_nul(argv(host, pid))]
    assert got == [V["verbatim_argv0"]] + V["verbatim_args"]
    assert host.file("/proc/%s/exe" % pid).linked_to.startswith("/usr/bin/python3")
    env = environ(host, pid)
    for k, v in V["verbatim_env"].items():
        assert env[k.encode()] == v.encode()


def test_changed_unit_does_not_restart_a_running_server(host):
    before = show(host, "sglang", "MainPID")["MainPID"]
    run_role(host, {"systemd_unit_environment": {"SGLANG_DOUBLE_LOAD_SECONDS": "3", "SGLANG_DOUBLE_DEVICES": "/dev/nvidia*",
                                                 "NEW_SETTING": "1"}})
    assert show(host, "sglang", "MainPID")["MainPID"] == before
    assert "NEW_SETTING" in host.file("/etc/inferops/sglang/sglang.env").content_string


def test_stop_of_0_5_23_exits_0_and_is_clean(host):
    host.check_output("systemctl restart sglang")  # picks up the changed environment, blocks until ready
    host.check_output("systemctl stop sglang")
    p = show(host, "sglang", "ActiveState", "Result", "ExecMainStatus", "ExecMainCode")
    assert p["ActiveState"] == "inactive" and p["Result"] == "success" and p["ExecMainStatus"] == "0", p


def test_stop_of_0_5_15_sigkills_itself_and_is_still_clean(host):
    run_role(host, {"systemd_unit_environment": {"SGLANG_DOUBLE_LOAD_SECONDS": "3", "SGLANG_DOUBLE_VERSION": "0.5.15"},
                    "systemd_unit_start": True})
    assert host.service("sglang").is_running
    host.check_output("systemctl stop sglang")
    p = show(host, "sglang", "ActiveState", "Result", "ExecMainStatus", "ExecMainCode")
    assert p["ActiveState"] == "inactive" and p["Result"] == "success", p
    assert p["ExecMainStatus"] == "9", "the main process SIGKILLed itself, as 0.5.15 does"


def test_crashes_restart(host):
    # The starts above count against StartLimitBurst=3 (an hour): clear them, as an operator would.
    host.check_output("systemctl reset-failed sglang; systemctl start sglang")
    n0 = int(show(host, "sglang", "NRestarts")["NRestarts"])
    main = show(host, "sglang", "MainPID")["MainPID"]
    host.check_output("kill -9 %s" % main)  # an OOM kill: SIGKILL while running
    wait(lambda: int(show(host, "sglang", "NRestarts")["NRestarts"]) == n0 + 1)
    wait(lambda: show(host, "sglang", "ActiveState")["ActiveState"] == "active", 90)
    sched = host.check_output("pgrep -f '^sglang::scheduler_TP1'")
    host.check_output("kill -TERM %s" % sched)  # a scheduler dies: the server exits 1
    wait(lambda: int(show(host, "sglang", "NRestarts")["NRestarts"]) == n0 + 2)
    wait(lambda: show(host, "sglang", "ActiveState")["ActiveState"] == "active", 90)


def run_role(host, extra):
    import subprocess
    variables = {"systemd_unit_command": V["sglang_command"]}
    variables.update(extra)
    play = [{"hosts": "all", "gather_facts": False,
             "roles": [{"role": "inferops.sglang.systemd_unit", "vars": variables}]}]
    path = os.path.join(os.environ.get("MOLECULE_EPHEMERAL_DIRECTORY", "/tmp"), "systemd_unit_rerun.yml")
    with open(path, "w") as f:
        json.dump(play, f)
    subprocess.run(["ansible-playbook", "-i", os.environ["MOLECULE_INVENTORY_FILE"], path], check=True,
                   stdout=subprocess.DEVNULL)
