"""sglang_discover's look at the captured model: measured always, warmed with prewarm=auto only when a switch is
ahead and not in check mode; on real files evicted from the page cache."""
import pytest

from ansible_collections.inferops.sglang.plugins.module_utils._manager_sglang_discover import SglangDiscover
from .conftest import MIB, Failed, FakeModule, evict, write


class Module(FakeModule):
    """What the manager uses of AnsibleModule."""

    defaults = dict(port=30000, unit="sglang-30000", capture_path=None, redact=[], prewarm="auto", prewarm_budget=60,
                    prewarm_margin_gib=0)


@pytest.fixture
def cap(tmp_path):
    """A capture whose --model-path is relative to its cwd; its weights out of the page cache."""
    model = tmp_path / "llama"
    model.mkdir()
    for name in ("model-1.safetensors", "model-2.safetensors"):
        evict(write(model / name, 8 * MIB))
    (model / "config.json").write_text("{}")
    return {"argv": ["python", "-m", "sglang.launch_server", "--model-path", "llama"], "environment": {},
            "cwd": str(tmp_path), "user": "root"}


def test_auto_warms_what_the_switch_will_load(cap):
    m = SglangDiscover(Module()).model_files(cap, warm=True)
    assert m["files"] == 2 and m["bytes"] == 16 * MIB and m["resident"] < 16 * MIB and m["available"] > 0
    assert m["warm"]["read"] >= 16 * MIB - m["resident"] and m["warm"]["resident_after"] == 16 * MIB
    assert m["warm"]["resident_before"] == m["resident"] and m["warm"]["errors"] == []
    assert m["summary"].startswith("model: 17 MB in 2 files, ") and "100 % resident after" in m["summary"]


@pytest.mark.parametrize("check_mode, warm, skipped", [(True, True, "check mode"),
                                                       (False, False, "the unit serves the port already")])
def test_check_mode_and_a_unit_serving_already_only_measure(cap, check_mode, warm, skipped):
    m = SglangDiscover(Module(check_mode=check_mode)).model_files(cap, warm=warm)
    assert m["warm"] is None and m["warm_skipped"] == skipped and m["summary"].endswith("; not warmed: " + skipped)
    assert SglangDiscover(Module()).model_files(cap, warm=False)["resident"] < 16 * MIB  # nothing was read


def test_off_only_measures_and_no_capture_is_none(cap):
    m = SglangDiscover(Module(prewarm="off")).model_files(cap, warm=True)
    assert m["warm"] is None and "warm_skipped" not in m and m["resident"] < 16 * MIB
    assert SglangDiscover(Module()).model_files({}, warm=True) is None


def test_a_negative_budget_or_margin_is_refused():
    for bad in (dict(prewarm_budget=-1), dict(prewarm_margin_gib=-1)):
        with pytest.raises(Failed, match="prewarm_budget and prewarm_margin_gib must be >= 0"):
            SglangDiscover(Module(**bad)).run()
