"""gpu_release, the module whole (its spec, its checks, check mode), from the cases in test_gpu_release.yaml."""
import pytest

from ansible_collections.inferops.sglang.plugins.modules import gpu_release

from .uthelper import cases_of, check, run


@pytest.mark.parametrize("case", cases_of(__file__))
def test_gpu_release(case, tmp_path, monkeypatch, capfd):
    check(*run(gpu_release, case, tmp_path, monkeypatch, capfd))
