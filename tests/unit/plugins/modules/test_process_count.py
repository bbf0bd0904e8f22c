"""process_count, the module whole (its spec, its checks, check mode), from the cases in test_process_count.yaml."""
import pytest

from ansible_collections.inferops.sglang.plugins.modules import process_count

from .uthelper import cases_of, check, run


@pytest.mark.parametrize("case", cases_of(__file__))
def test_process_count(case, tmp_path, monkeypatch, capfd):
    check(*run(process_count, case, tmp_path, monkeypatch, capfd))
