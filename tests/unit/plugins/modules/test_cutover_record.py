"""cutover_record, the module whole (its spec, its checks, check mode), from the cases in test_cutover_record.yaml."""
import pytest

from ansible_collections.inferops.sglang.plugins.modules import cutover_record

from .uthelper import cases_of, check, run


@pytest.mark.parametrize("case", cases_of(__file__))
def test_cutover_record(case, tmp_path, monkeypatch, capfd):
    check(*run(cutover_record, case, tmp_path, monkeypatch, capfd))
