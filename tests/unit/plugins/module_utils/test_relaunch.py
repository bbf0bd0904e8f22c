"""The rollback's relaunch: the captured command started again exactly as it ran."""
import os
import sys

from ansible_collections.inferops.sglang.plugins.module_utils import (
    _discover, _procfs, _signals, _switch_outcome, _switch_worker)

from tests.unit.conftest import free_port, wait_for
from .conftest import Systemctl, server_cmd, wait_listening


def test_back_to_the_capture_starts_it_exactly_as_it_ran(shell, tmp_path):
    """A rollback: the captured command again, with its argv (argv[0] as typed), environment, cwd and log."""
    port = free_port()
    shell("cd %s && export PATH=%s:$PATH && INFEROPS_MARK='a b \"c\"' nohup %s > srv.log 2>&1 & wait" % (
        tmp_path, os.path.dirname(sys.executable), server_cmd(port, "python3")))
    (pid,) = wait_listening(port)
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    cap = _discover.capture(pid)
    assert cap["stdout"] == cap["stderr"] == str(tmp_path / "srv.log")
    _switch_outcome.write_json(str(state / "capture.json"), cap)
    _signals.stop([_procfs.read(pid)], grace=10)
    wait_for(lambda: not _discover.listeners(port, _procfs.snapshot()), 10)
    size = (tmp_path / "srv.log").stat().st_size
    plan = dict(id="t5", action="rollback", target="capture", port=port, unit="sglang.service", unit_name="sglang",
                state_dir=str(state), drain=1.0, release_strays=False, devices=[str(tmp_path / "nvidia*")])
    systemctl = Systemctl()
    outcome = _switch_worker.Worker(plan, run=systemctl).go()
    assert outcome["error"] is None, outcome
    assert [s["step"] for s in outcome["steps"]] == ["stop server", "verify zero", "release GPUs", "start captured command"]
    assert ["systemctl", "stop", "sglang.service"] in systemctl.calls
    (again,) = wait_listening(port)
    assert again == outcome["pid_started"] != pid
    assert _procfs.read(again).argv == cap["argv"] and cap["argv"][0] == "python3"
    assert _procfs.environ(again) == cap["environment"] and _procfs.environ(again)["INFEROPS_MARK"] == 'a b "c"'
    assert os.readlink("/proc/%d/cwd" % again) == str(tmp_path)
    assert os.readlink("/proc/%d/fd/1" % again) == str(tmp_path / "srv.log")
    wait_for(lambda: (tmp_path / "srv.log").stat().st_size > size, 10)  # appended, not truncated
    assert (tmp_path / "srv.log").read_text().count("server_args=") == 2
    proc = _procfs.read(again)
    assert proc.sid == again, "a session of its own, as nohup and a closed terminal leave it"
