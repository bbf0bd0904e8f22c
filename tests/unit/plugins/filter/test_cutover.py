"""The plan stage (plugins/filter/cutover.py): what the unit runs, adopted from a capture; how it differs from what
runs, secrets masked; this host's rank; and the one mapping the plan stage's filter gives of them."""
import pytest

from ansible.errors import AnsibleFilterError
from ansible_collections.inferops.sglang.plugins.filter.cutover import adopt, changes, cutover_plan
from ansible_collections.inferops.sglang.plugins.module_utils._host.redact import MASK

KEY = "sk-secret-123"
CAPTURE = {
    "argv": ["python", "-m", "sglang.launch_server", "--port", "30000", "--api-key", KEY],
    "argv0_resolved": "/opt/sglang/venv/bin/python",
    "exe": "/usr/bin/python3.11",
    "environment": {"PATH": "/opt/sglang/venv/bin:/usr/bin", "VIRTUAL_ENV": "/opt/sglang/venv", "PWD": "/root",
                    "SHLVL": "2", "_": "/usr/bin/nohup", "SSH_CONNECTION": "1 2 3 4", "XDG_SESSION_ID": "3",
                    "HF_TOKEN": "hf-secret", "NCCL_DEBUG": "WARN", "HOME": "/root"},
    "cwd": "/root",
    "user": "root",
    "group": "root",
}


def test_adopts_the_capture_with_argv0_resolved_and_no_shell_noise():
    plan = adopt(CAPTURE)
    assert plan["source"] == "capture"
    assert plan["command"] == ["/opt/sglang/venv/bin/python"] + CAPTURE["argv"][1:]
    assert plan["environment"] == {"PATH": "/opt/sglang/venv/bin:/usr/bin", "VIRTUAL_ENV": "/opt/sglang/venv",
                                   "HF_TOKEN": "hf-secret", "NCCL_DEBUG": "WARN"}
    assert plan["dropped"] == ["HOME", "PWD", "SHLVL", "SSH_CONNECTION", "XDG_SESSION_ID", "_"]
    assert (plan["working_directory"], plan["user"], plan["group"], plan["venv"]) == ("/root", "root", "root",
                                                                                      "/opt/sglang/venv")


def test_overrides_win():
    plan = adopt(CAPTURE, ["/srv/venv/bin/python3", "-m", "sglang.launch_server"], ["--tp", "8"],
                 {"NCCL_DEBUG": "INFO", "PWD": "/keep"}, "/srv", "sglang", "gpu")
    assert plan["source"] == "variables"
    assert plan["command"] == ["/srv/venv/bin/python3", "-m", "sglang.launch_server", "--tp", "8"]
    assert plan["environment"]["NCCL_DEBUG"] == "INFO" and plan["environment"]["PWD"] == "/keep"
    assert "PWD" not in plan["dropped"]
    assert (plan["working_directory"], plan["user"], plan["group"], plan["venv"]) == ("/srv", "sglang", "gpu", "/srv/venv")


def test_falls_back_to_exe_and_refuses_nothing_to_adopt():
    assert adopt(dict(CAPTURE, argv0_resolved=None))["command"][0] == "/usr/bin/python3.11"
    with pytest.raises(AnsibleFilterError, match="no capture and no cutover_command"):
        adopt({})
    with pytest.raises(AnsibleFilterError, match="list of strings"):
        adopt(CAPTURE, ["/bin/x", 1])
    with pytest.raises(AnsibleFilterError, match="names to strings"):
        adopt(CAPTURE, environment={"N": 1})


def test_changes_name_each_difference_and_never_a_secret():
    plan = adopt(CAPTURE, extra_args=["--enable-metrics"], environment={"NCCL_DEBUG": "INFO", "NEW_TOKEN": "t0k"})
    lines = changes(CAPTURE, plan)
    text = "\n".join(lines)
    assert lines[0] == "argv[0]: python -> /opt/sglang/venv/bin/python (as the shell resolved it on the captured PATH)"
    assert "arguments the unit: -m sglang.launch_server --port 30000 --api-key ******** --enable-metrics" in lines
    assert "env - shell noise: HOME, PWD, SHLVL, SSH_CONNECTION, XDG_SESSION_ID, _" in lines
    assert "env ~ NCCL_DEBUG=INFO" in lines and "env + NEW_TOKEN=********" in lines
    for secret in (KEY, "hf-secret", "t0k"):
        assert secret not in text


def test_no_change_and_no_capture():
    same = dict(CAPTURE, argv=["/opt/sglang/venv/bin/python"] + CAPTURE["argv"][1:],
                environment={"PATH": "/usr/bin"})
    assert changes(same, adopt(same)) == ["the unit runs exactly what runs now"]
    lines = changes({}, adopt({}, ["/opt/v/bin/python", "--api-key", KEY]))
    assert lines[0] == "there is no capture of a server launched by hand: the unit comes from variables alone"
    assert KEY not in "".join(lines)


def test_a_console_script_server_keeps_its_entry_point_and_venv():
    """`sglang serve` runs as `VENV/bin/python3 VENV/bin/sglang serve ...` (the script's shebang) in /proc."""
    serve = dict(CAPTURE, argv=["/opt/sglang/venv/bin/python3", "/opt/sglang/venv/bin/sglang", "serve", "--port", "30000"],
                 argv0_resolved="/opt/sglang/venv/bin/python3")
    plan = adopt(serve)
    assert plan["command"] == serve["argv"] and plan["venv"] == "/opt/sglang/venv"
    given = adopt(CAPTURE, ["/srv/venv/bin/sglang", "serve", "--model-path", "/m"])
    assert given["venv"] == "/srv/venv"


RANKED = ["/srv/venv/bin/python", "-m", "sglang.launch_server", "--nnodes", "2", "--node-rank", "1",
          "--dist-init-addr", "10.0.0.1:20000", "--api-key", KEY]


@pytest.mark.parametrize("capture, given, rank", [
    # the role's plan: the capture's own changes; no rank for a server on one host, or without multinode
    (CAPTURE, dict(extra_args=["--enable-metrics"]), None),
    (CAPTURE, dict(multinode=True), None),
    ({}, dict(command=RANKED), None),
    # a rank of a multi-node server, read from the command with its secrets masked
    ({}, dict(command=RANKED, multinode=True), (2, 1, "10.0.0.1:20000", "rank >= 1")),
    # the status's drift: what runs now against what the stored capture makes the unit run
    (dict(CAPTURE, argv=["/opt/sglang/venv/bin/python"] + CAPTURE["argv"][1:], environment={"PATH": "/usr/bin"}),
     dict(now=CAPTURE), None),
])
def test_the_plan_stage_is_one_mapping(capture, given, rank):
    now = given.pop("now", None)
    multinode = given.pop("multinode", False)
    plan = cutover_plan(capture, now=now, multinode=multinode, **given)
    unit = adopt(capture, **given)
    assert dict((k, plan[k]) for k in unit) == unit and set(plan) == set(unit) | {"changes", "model", "rank"}
    assert plan["changes"] == changes(capture if now is None else now, unit)
    if rank is None:
        assert plan["rank"] is None
    else:
        from ansible_collections.inferops.sglang.plugins.filter.cutover import redact_argv
        from ansible_collections.inferops.sglang.plugins.filter.cutover_multinode import rank_of
        assert (plan["rank"]["nnodes"], plan["rank"]["node_rank"], plan["rank"]["dist_init_addr"],
                plan["rank"]["role"]) == rank
        assert plan["rank"] == rank_of(redact_argv(unit["command"])) != rank_of(unit["command"]), "secrets masked"
    assert KEY not in "".join(plan["changes"])


def test_redact_argv_keeps_the_shape_and_masks_every_secret():
    """What sglang_switch is given to parse: the same options, no secret (--api-key, a prefix argparse takes for
    --admin-api-key, a flag of the caller's, a secret-looking NAME=)."""
    from ansible_collections.inferops.sglang.plugins.filter.cutover import redact_argv
    argv = ["/v/bin/python", "-m", "sglang.launch_server", "--api-key", "sk-1", "--admin-api=adm-2", "--my-secret",
            "s-3", "DB_PASS=pw-4", "--port", "30000"]
    assert redact_argv(argv, ["--my-secret"]) == [
        "/v/bin/python", "-m", "sglang.launch_server", "--api-key", MASK, "--admin-api=" + MASK, "--my-secret", MASK,
        "DB_PASS=" + MASK, "--port", "30000"]
    with pytest.raises(AnsibleFilterError):
        redact_argv("python -m sglang.launch_server --api-key sk")


M = ["/v/bin/python", "-m", "sglang.launch_server", "--model-path", "/models/a", "--port", "30000"]


@pytest.mark.parametrize("now, given, model", [
    (M, {}, None),  # the same command: the wait expects the model served before
    (M, dict(extra_args=["--max-running-requests", "8"]), None),
    (M, dict(extra_args=["--model-path", "/models/b"]), "/models/b"),  # the last one wins, as in argparse
    (M, dict(extra_args=["--model=/models/b"]), "/models/b"),
    (M, dict(extra_args=["--served-model-name", "chat"]), "chat"),
    (M + ["--served-model-name", "chat"], dict(extra_args=["--model-path", "/models/b"]), None),  # the name stays
    (M, dict(command=M[:3] + ["--config", "/etc/s.yaml"]), None),  # a --config file may name it: cannot tell
    (None, dict(command=M), "/models/a"),  # nothing ran: what the command names
])
def test_the_plan_names_the_model_only_where_the_command_names_another(now, given, model):
    capture = {"argv": now, "exe": "/v/bin/python"} if now else {}
    assert cutover_plan(capture, **given)["model"] == model


def test_a_unit_made_from_variables_alone_gets_the_venv_s_bin_on_path():
    """Nothing captured: systemd's own PATH lacks the venv's tools (a real 0.5.17 scheduler failed on `ninja` not
    found), so the venv's bin goes first, as its activate script puts it; a PATH given or captured is kept."""
    alone = adopt({}, ["/srv/venv/bin/python", "-m", "sglang.launch_server", "--port", "30000"])
    assert alone["environment"] == {"PATH": "/srv/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
    assert adopt({}, ["/srv/venv/bin/sglang", "serve"])["environment"]["PATH"].startswith("/srv/venv/bin:")
    assert adopt({}, ["/srv/venv/bin/python"], environment={"PATH": "/x"})["environment"] == {"PATH": "/x"}
    assert adopt(CAPTURE)["environment"]["PATH"] == "/opt/sglang/venv/bin:/usr/bin"
    assert "PATH" not in adopt({}, ["/usr/local/bin/serve-it"])["environment"]  # no venv to tell
