"""sglang_patch, the module whole (its spec, its checks, check mode), from the cases in test_sglang_patch.yaml."""
import pytest

from ansible_collections.inferops.sglang.plugins.modules import sglang_patch

from .uthelper import cases_of, check, run


@pytest.mark.parametrize("case", cases_of(__file__))
def test_sglang_patch(case, tmp_path, monkeypatch, capfd):
    check(*run(sglang_patch, case, tmp_path, monkeypatch, capfd))
