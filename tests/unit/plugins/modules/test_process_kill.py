"""process_kill, the module whole (its spec, its checks, check mode), from the cases in test_process_kill.yaml."""
import pytest

from ansible_collections.inferops.sglang.plugins.modules import process_kill

from .uthelper import cases_of, check, run


@pytest.mark.parametrize("case", cases_of(__file__))
def test_process_kill(case, tmp_path, monkeypatch, capfd):
    check(*run(process_kill, case, tmp_path, monkeypatch, capfd))
