"""The server's arguments parsed by the installed SGLang's own parser (the double's stands in), before any stop."""
import os
import sys

import pytest

from ansible_collections.inferops.sglang.plugins.module_utils import _sglang_args

from .conftest import installed_double


@pytest.fixture
def site(tmp_path, monkeypatch):
    path = installed_double(tmp_path)
    monkeypatch.setenv("PYTHONPATH", path)
    return path


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
def test_the_installed_sglang_parses_the_arguments(site, monkeypatch, version, args, refused):
    monkeypatch.setenv("SGLANG_DOUBLE_VERSION", version)
    python, arguments, prog = _sglang_args.interpreter(launch(*args))
    why = _sglang_args.refusal(python, arguments, prog)
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


def test_an_sglang_without_its_parser_module_is_said_unchecked(tmp_path, monkeypatch):
    site = tmp_path / "old"
    (site / "sglang").mkdir(parents=True)
    (site / "sglang" / "__init__.py").touch()
    monkeypatch.setenv("PYTHONPATH", str(site))
    said = _sglang_args.refusal(sys.executable, ["--x"], "launch_server.py")
    assert isinstance(said, _sglang_args.NotChecked) and "no sglang.srt.server_args" in said
