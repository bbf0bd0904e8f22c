"""tests/gpu/run.sh rehearsed on the CPU: the same servers, job, daemon, playbooks and checks as on a GPU host,
with regular files as device nodes and no CUDA (so no NCCL communicator: the probe's spawned rank reports
the environment the venv's .pth gave it)."""
import json
import os
import shutil
import subprocess
import sys

import pytest

from tests.unit.conftest import ROOT, free_port


@pytest.mark.skipif(shutil.which("nvidia-smi") is not None, reason="a GPU host: run tests/gpu/run.sh itself")
def test_the_gpu_run_rehearsed_on_the_cpu(tmp_path):
    out = tmp_path / "out"
    env = dict(os.environ, PYTHON=sys.executable, PORT_A=str(free_port()), PORT_B=str(free_port()), LOAD_TIMEOUT="60")
    p = subprocess.run(["bash", str(ROOT / "tests" / "gpu" / "run.sh"), str(out)], env=env, stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, universal_newlines=True, timeout=300, check=False)
    assert p.returncode == 0, p.stdout[-6000:]
    facts = [s["result"] for s in json.loads((out / "run.json").read_text()) if s["name"] == "facts"][0]
    assert facts["checks"] and all(v in (True, "True") for v in facts["checks"].values()), facts["checks"]
    assert not set(facts["family_a"]) & set(facts["family_b"]) and facts["orphan"][0] in facts["family_a"]
    summary = (out / "summary.md").read_text()
    assert "decoy alive" in summary and "torch_job alive" in summary and "**unexpected**" not in summary
    assert '"NCCL_PROTO": "LL"' in (out / "nccl-probe-present.log").read_text()
    assert '"NCCL_PROTO": null' in (out / "nccl-probe-absent.log").read_text()
    assert json.loads((out / "nccl-absent.json").read_text())["names"] == []
