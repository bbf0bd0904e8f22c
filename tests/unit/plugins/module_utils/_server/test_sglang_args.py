"""The server's arguments parsed by the installed SGLang's own parser (the double's stands in), before any stop."""
import os
import sys

import pytest

from ansible_collections.inferops.sglang.plugins.module_utils._host import owner as _owner
from ansible_collections.inferops.sglang.plugins.module_utils._server import sglang_args as _sglang_args

from ..conftest import NOBODY, installed_double


@pytest.fixture
def site(tmp_path):
    """The environment (besides the clean one) that finds the double."""
    return {"PYTHONPATH": installed_double(tmp_path)}


def launch(*args):
    return [sys.executable, "-u", "-m", "sglang.launch_server", "--model-path", "/models/m", "--port", "30000"] + list(args)


def test_the_entry_points_and_their_interpreters(tmp_path):
    assert _sglang_args.interpreter(launch("--tp", "2")) == (
        sys.executable, ["--model-path", "/models/m", "--port", "30000", "--tp", "2"], "launch_server.py")
    script = tmp_path / "sglang"
    script.write_text("#!%s\nimport sys\n" % sys.executable)
    assert _sglang_args.interpreter([str(script), "serve", "--model-path", "m"]) == (
        sys.executable, ["--model-path", "m"], "sglang serve")
    assert _sglang_args.interpreter([sys.executable, "serve.py", "--x"]) == (sys.executable, None, None)
    assert _sglang_args.interpreter(["/usr/bin/bash", "run.sh"]) == (None, None, None)


@pytest.mark.parametrize("version, args, refused", [
    ("0.5.23", [], None),
    ("0.5.23", ["--x"], "unrecognized arguments: --x"),
    ("0.5.23", ["--enable-piecewise-cuda-graph"], "unrecognized arguments: --enable-piecewise-cuda-graph"),
    ("0.5.9", ["--enable-piecewise-cuda-graph"], None),
    ("0.5.23", ["--cuda-graph-max-bs", "8"], "ambiguous option: --cuda-graph-max-bs could match"),
    ("0.5.9", ["--cuda-graph-max-bs", "8"], None),
    ("0.5.9", ["--tp"], "--tp-size: expected one argument"),
])
def test_the_installed_sglang_parses_the_arguments(site, version, args, refused):
    python, arguments, prog = _sglang_args.interpreter(launch(*args))
    why = _sglang_args.refusal(python, arguments, prog, env=dict(site, SGLANG_DOUBLE_VERSION=version))
    if refused is None:
        assert why is None
    else:
        assert why.startswith("SGLang refuses the server's arguments: launch_server.py: error: ") and refused in why, why


def test_a_parser_that_hangs_is_given_up_on(tmp_path):
    slow = tmp_path / "python3"
    slow.write_text("#!/bin/sh\nexec sleep 30\n")
    slow.chmod(0o755)
    assert "did not answer within 1 s" in _sglang_args.refusal(str(slow), [], "launch_server.py", timeout=1.0)


def test_no_gpu_is_visible_to_the_parser(site, tmp_path):
    probe = tmp_path / "python3"
    probe.write_text("#!/bin/sh\necho \"$CUDA_VISIBLE_DEVICES|$HIP_VISIBLE_DEVICES\" >&2; exit 2\n")
    probe.chmod(0o755)
    assert _sglang_args.refusal(str(probe), [], "launch_server.py", env=dict(os.environ, CUDA_VISIBLE_DEVICES="0")) == (
        "SGLang refuses the server's arguments: |")


def test_an_sglang_without_its_parser_module_is_said_unchecked(tmp_path):
    site = tmp_path / "old"
    (site / "sglang").mkdir(parents=True)
    (site / "sglang" / "__init__.py").touch()
    said = _sglang_args.refusal(sys.executable, ["--x"], "launch_server.py", env={"PYTHONPATH": str(site)})
    assert isinstance(said, _sglang_args.NotChecked) and "no sglang.srt.server_args" in said


@pytest.mark.skipif(os.getuid() != 0, reason="needs root: it parses as nobody")
def test_the_parse_runs_as_the_owner(nobody_venv):
    """The venv's owner planted a .pth: it runs as nobody (the parse still answers), never as root."""
    owner = _owner.Owner(NOBODY.pw_uid, NOBODY.pw_gid)
    assert _sglang_args.refusal(nobody_venv.python, ["--model-path", "m", "--x"], "launch_server.py", owner=owner) == (
        "SGLang refuses the server's arguments: launch_server.py: error: unrecognized arguments: --x")
    assert _sglang_args.refusal(nobody_venv.python, ["--model-path", "m"], "launch_server.py", owner=owner) is None
    assert nobody_venv.ran_as() and set(nobody_venv.ran_as()) == {NOBODY.pw_uid}


@pytest.mark.parametrize("args, gpus", [
    ([], [0]),
    (["--tp", "4"], [0, 1, 2, 3]),
    (["--tp-size", "2", "--tp=4"], [0, 1, 2, 3]),  # the last one wins, as in argparse
    (["--tensor-parallel-size", "2", "--base-gpu-id", "4"], [4, 5]),
    (["--tp", "2", "--gpu-id-step", "2", "--base-gpu-id", "1"], [1, 3]),
    (["--tp", "2", "--dp", "2"], [0, 1, 2, 3]),
    (["--tp", "2", "--dp-size", "2", "--gpu-id-step", "2"], [0, 2, 4, 6]),
    (["--tp", "4", "--dp", "4", "--enable-dp-attention"], [0, 1, 2, 3]),  # the replicas share the TP group
    (["--tp", "2", "--pp-size", "2"], [0, 1, 2, 3]),
    (["--tp", "8", "--nnodes", "2", "--node-rank", "1"], [0, 1, 2, 3]),  # this node's share
    (["--tp", "4", "--nnodes", "2", "--node-rank", "1", "--base-gpu-id", "2"], [2, 3]),
])
def test_the_gpus_a_servers_arguments_place_it_on(args, gpus):
    argv = ["/v/bin/python", "-m", "sglang.launch_server", "--model-path", "/m"] + args
    assert _sglang_args.gpu_ids(argv) == gpus


@pytest.mark.parametrize("args, why", [
    (["--config", "c.yaml"], "its --config file may set the options that place it"),
    (["--tp", "two"], "are not all numbers"),
    (["--tp", "0"], "are not positive"),
])
def test_arguments_that_cannot_tell_the_gpus_say_why(args, why):
    with pytest.raises(ValueError) as e:
        _sglang_args.gpu_ids(["python", "-m", "sglang.launch_server"] + args)
    assert why in str(e.value)


@pytest.mark.parametrize("argv, name", [
    (["py", "--model-path", "/m/a"], "/m/a"),
    (["py", "--model", "/m/a", "--model-path", "/m/b"], "/m/b"),  # one dest, the last wins
    (["py", "--model-path=/m/a", "--served-model-name", "chat"], "chat"),
    (["py", "--served-model-name=chat", "--model-path", "/m/a"], "chat"),
    (["py", "--model-path", "/m/a", "--config", "s.yaml"], None),  # the file may name another
    (["py", "--port", "30000"], None),
])
def test_the_model_a_command_serves_is_its_served_name_else_its_model_path(argv, name):
    assert _sglang_args.served_model(argv) == name
