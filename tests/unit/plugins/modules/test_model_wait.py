"""model_wait, the module whole (its spec, its checks, check mode), from the cases in test_model_wait.yaml."""
import pytest

from ansible_collections.inferops.sglang.plugins.modules import model_wait

from .uthelper import cases_of, check, run


@pytest.mark.parametrize("case", cases_of(__file__))
def test_model_wait(case, tmp_path, monkeypatch, capfd):
    check(*run(model_wait, case, tmp_path, monkeypatch, capfd))
