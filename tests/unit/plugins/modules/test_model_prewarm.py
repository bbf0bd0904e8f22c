"""model_prewarm, the module whole (its spec, its checks, check mode), from the cases in test_model_prewarm.yaml."""
import pytest

from ansible_collections.inferops.sglang.plugins.modules import model_prewarm

from .uthelper import cases_of, check, run


@pytest.mark.parametrize("case", cases_of(__file__))
def test_model_prewarm(case, tmp_path, monkeypatch, capfd):
    check(*run(model_prewarm, case, tmp_path, monkeypatch, capfd))
