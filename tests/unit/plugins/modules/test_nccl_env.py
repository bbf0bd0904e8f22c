"""nccl_env, the module whole (its spec, its checks, check and diff mode), from the cases in test_nccl_env.yaml."""
import pytest

from ansible_collections.inferops.sglang.plugins.modules import nccl_env

from .uthelper import cases_of, check, run


@pytest.mark.parametrize("case", cases_of(__file__))
def test_nccl_env(case, tmp_path, monkeypatch, capfd):
    check(*run(nccl_env, case, tmp_path, monkeypatch, capfd))
