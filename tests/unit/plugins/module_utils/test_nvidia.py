"""Device-file holders found from /proc/PID/fd, scoped by GPU, daemons spared; nvidia-smi readings."""
import os
import stat
import subprocess
import sys
import time

import pytest

from ansible_collections.inferops.sglang.plugins.module_utils import _nvidia, _procfs, _signals
from ansible_collections.inferops.sglang.plugins.module_utils._command import CommandError
from ansible_collections.inferops.sglang.plugins.module_utils._selection import Selector, SelectionError

from tests.unit.conftest import ROOT

from .conftest import run_command
from . import programs

DOUBLE = str(ROOT / "tests" / "sglang_double")


def globs(devices):
    return [str(devices / "nvidia*"), str(devices / "nvidia-caps" / "*")]


def test_gpu_of():
    assert _nvidia.gpu_of("/dev/nvidia3") == 3
    assert _nvidia.gpu_of("/dev/nvidiactl") is None
    assert _nvidia.gpu_of("/dev/nvidia-uvm") is None
    assert _nvidia.gpu_of("/dev/nvidia-caps/nvidia-cap1") is None


def test_release_of_gpu_0_spares_gpu_1_shared_only_and_the_daemon(run, devices, decoy):
    d = devices
    shared = [str(d / "nvidiactl"), str(d / "nvidia-uvm"), str(d / "nvidia-caps/nvidia-cap1"), str(d / "nvidia-caps/nvidia-cap2")]
    gpu0 = run(programs.HOLDER, str(d / "nvidia0"), *shared)[0]
    gpu1 = run(programs.HOLDER, str(d / "nvidia1"), *shared)[0]
    ctl_only = run(programs.HOLDER, *shared[:2])[0]
    procs = _procfs.snapshot()
    plan = _nvidia.plan(procs, Selector(required=False), globs(d), gpus=[0])
    by_pid = dict((h.proc.pid, h) for h in plan.holders)
    assert set(by_pid) == {gpu0.pid, gpu1.pid, ctl_only.pid, decoy.pid}
    assert by_pid[gpu0.pid].gpus == [0] and str(d / "nvidia-caps/nvidia-cap1") in by_pid[gpu0.pid].files
    assert [h.proc.pid for h in plan.targets] == [gpu0.pid]
    assert [h.proc.pid for h in plan.shared_only] == [ctl_only.pid]
    assert [(h.proc.pid, why) for h, why in plan.protected] == [(decoy.pid, "protected (nvidia-persistenced)")]
    res = _signals.stop([h.proc for h in plan.targets], grace=5)
    assert res.remaining == []
    assert gpu0.wait(timeout=2) == -15
    for alive in (gpu1, ctl_only, decoy):
        assert alive.poll() is None
    # all GPUs: the holder of GPU 1 is a target too, never the daemon
    plan = _nvidia.plan(_procfs.snapshot(), Selector(required=False), globs(d))
    assert [h.proc.pid for h in plan.targets] == [gpu1.pid]


def test_untitled_multiprocessing_orphan_is_found_by_its_devices(devices, tmp_path, spawn):
    """What a SIGKILLed torch parent leaves: a spawn child holding the GPU, nothing of the launcher's name."""
    env = dict(os.environ, PYTHONPATH=DOUBLE, SGLANG_DOUBLE_LOAD_SECONDS="0.2",
               SGLANG_DOUBLE_FAULTS="untitled_orphan", SGLANG_DOUBLE_DEVICES=" ".join(globs(devices)))
    server = subprocess.Popen([sys.executable, "-m", "sglang.launch_server", "--model-path", "m", "--tp", "1",
                               "--port", "0", "--served-model-name", spawn.marker], env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    spawn.procs.append(server)
    from tests.unit.conftest import wait_for
    wait_for(lambda: len(_nvidia.holders(_procfs.snapshot(), globs(devices))) >= 2)
    server.kill()
    server.wait()
    by_pattern = Selector(pattern=r"sglang\.launch_server|sglang::").select()
    plan = _nvidia.plan(_procfs.snapshot(), Selector(required=False), globs(devices))
    orphans = [h for h in plan.targets if "spawn_main" in h.proc.cmdline]
    assert len(orphans) == 1, [h.proc.cmdline for h in plan.holders]
    orphan = orphans[0].proc
    assert orphan.pid not in [p.pid for p in by_pattern.targets], "a pattern kill misses it"
    assert orphan.ppid != server.pid and "sglang" not in orphan.cmdline


def test_max_targets_applies_to_holders(run, devices):
    run(programs.HOLDER, str(devices / "nvidia0"))
    run(programs.HOLDER, str(devices / "nvidia1"))
    with pytest.raises(SelectionError, match="max_targets=1"):
        _nvidia.plan(_procfs.snapshot(), Selector(required=False, max_targets=1), globs(devices))


FAKE_SMI = r"""#!/bin/sh
# nvidia-smi as a GPU host prints it (a test double: this machine has no GPU)
case "$1" in
  --query-gpu=index,memory.used) printf '0, 81234\n1, 0\n' ;;
  --query-compute-apps=pid,process_name,used_memory) printf '4242, /opt/sglang/venv/bin/python, 81000\n' ;;
  *) echo "bad args: $*" >&2; exit 6 ;;
esac
"""


def test_smi_reading_and_its_errors(tmp_path):
    exe = tmp_path / "nvidia-smi"
    exe.write_text(FAKE_SMI)
    exe.chmod(exe.stat().st_mode | stat.S_IEXEC)
    r = _nvidia.Smi(run_command, str(exe)).reading()
    assert r["gpus"] == [{"index": 0, "memory_used_mib": 81234}, {"index": 1, "memory_used_mib": 0}]
    assert r["compute_apps"] == [{"pid": 4242, "name": "/opt/sglang/venv/bin/python", "used_memory_mib": 81000}]
    exe.write_text("#!/bin/sh\necho 'NVIDIA-SMI has failed' >&2\nexit 9\n")
    with pytest.raises(RuntimeError, match="rc 9.*NVIDIA-SMI has failed"):
        _nvidia.Smi(run_command, str(exe)).reading()
    exe.write_text("#!/bin/sh\nsleep 5\n")
    t0 = time.monotonic()
    with pytest.raises(CommandError, match="did not answer within 1 s"):
        _nvidia.Smi(run_command, str(exe), timeout=0.3).reading()
    assert time.monotonic() - t0 < 3
    assert _nvidia.Smi(run_command, path=None).available is (_nvidia._which("nvidia-smi") is not None)
