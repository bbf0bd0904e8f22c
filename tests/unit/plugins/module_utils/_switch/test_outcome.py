"""The switch's outcome file, and the wait on it."""
import subprocess

import pytest

from ansible_collections.inferops.sglang.plugins.module_utils._switch import outcome as _switch_outcome


def test_wait_notices_a_worker_that_died(tmp_path):
    state = tmp_path / "state"
    state.mkdir()
    gone = subprocess.Popen(["true"])
    gone.wait()
    _switch_outcome.write_json(str(state / "switch.json"), {"id": "t4", "pid": gone.pid, "starttime": 1, "finished": False})
    out = _switch_outcome.wait(str(state), "t4", 5)
    assert "ended without finishing" in out["error"]
    with pytest.raises(TimeoutError):
        _switch_outcome.wait(str(state), "other", 0.3)
