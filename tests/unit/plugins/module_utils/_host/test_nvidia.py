"""Device-file holders found from /proc/PID/fd, scoped by GPU, daemons spared; nvidia-smi readings."""
import os
import stat
import subprocess
import sys
import time

import pytest

from ansible_collections.inferops.sglang.plugins.module_utils._host import (
    nvidia as _nvidia, procfs as _procfs, signals as _signals)
from ansible_collections.inferops.sglang.plugins.module_utils._host.command import CommandError
from ansible_collections.inferops.sglang.plugins.module_utils._host.selection import Selector, SelectionError

from tests.unit.conftest import wait_for
from ..conftest import DOUBLE, globs, run_command
from .. import programs


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
  --query-gpu=index,uuid,memory.used) printf '0, GPU-5d1c, 81234\n1, GPU-77ab, 0\n' ;;
  --query-compute-apps=pid,process_name,used_memory,gpu_uuid) printf '4242, /opt/sglang/venv/bin/python, 81000, GPU-5d1c\n' ;;
  *) echo "bad args: $*" >&2; exit 6 ;;
esac
"""


def test_smi_reading_and_its_errors(tmp_path):
    exe = tmp_path / "nvidia-smi"
    exe.write_text(FAKE_SMI)
    exe.chmod(exe.stat().st_mode | stat.S_IEXEC)
    r = _nvidia.Smi(run_command, str(exe)).reading()
    assert r["gpus"] == [{"index": 0, "memory_used_mib": 81234}, {"index": 1, "memory_used_mib": 0}]
    assert r["compute_apps"] == [{"pid": 4242, "name": "/opt/sglang/venv/bin/python", "used_memory_mib": 81000, "gpu": 0}]
    exe.write_text("#!/bin/sh\necho 'NVIDIA-SMI has failed' >&2\nexit 9\n")
    with pytest.raises(RuntimeError, match="rc 9.*NVIDIA-SMI has failed"):
        _nvidia.Smi(run_command, str(exe)).reading()
    exe.write_text("#!/bin/sh\nsleep 5\n")
    t0 = time.monotonic()
    with pytest.raises(CommandError, match="did not answer within 1 s"):
        _nvidia.Smi(run_command, str(exe), timeout=0.3).reading()
    assert time.monotonic() - t0 < 3
    assert _nvidia.Smi(run_command, path=None).available is (_nvidia._which("nvidia-smi") is not None)


# nvidia-smi as a GPU host prints it, one reading per call of the compute-apps query (the last one repeats):
# reading i is the files r<i>.gpu and r<i>.apps in the folder it was written for.
READINGS_SMI = r"""#!/bin/sh
d=%s
n=$(cat $d/n)
i=$(( n < $(ls $d | grep -c 'apps$') ? n : $(ls $d | grep -c 'apps$') - 1 ))
case "$1" in
  --query-gpu=index,uuid,memory.used) cat $d/r$i.gpu ;;
  --query-compute-apps=pid,process_name,used_memory,gpu_uuid) cat $d/r$i.apps; echo $((n + 1)) > $d/n ;;
  *) echo "bad args: $*" >&2; exit 6 ;;
esac
"""


@pytest.fixture
def smi_readings(tmp_path, monkeypatch):
    """readings([(memory.used of GPU 0 and 1, [(pid, MiB, gpu)]), ...]) -> (Smi found on PATH, how many read)."""
    d = tmp_path / "smi"
    d.mkdir()
    bin_dir = tmp_path / "smi-bin"
    bin_dir.mkdir()
    exe = bin_dir / "nvidia-smi"
    exe.write_text(READINGS_SMI % d)
    exe.chmod(0o755)
    monkeypatch.setenv("PATH", "%s:%s" % (bin_dir, os.environ["PATH"]))
    uuid = ["GPU-5d1c", "GPU-77ab"]

    def write(readings):
        for f in d.iterdir():
            f.unlink()
        for i, (used, apps) in enumerate(readings):
            (d / ("r%d.gpu" % i)).write_text("".join("%d, %s, %d\n" % (g, uuid[g], u) for g, u in enumerate(used)))
            (d / ("r%d.apps" % i)).write_text("".join("%d, python3, %d, %s\n" % (pid, mib, uuid[g]) for pid, mib, g in apps))
        (d / "n").write_text("0")
        smi = _nvidia.Smi(run_command)
        assert smi.path == str(exe)
        return smi, lambda: int((d / "n").read_text())

    return write


A, B, TORCH = 4101, 4202, 4303


def test_memory_back_waits_past_the_list_for_the_memory(smi_readings):
    """What an H200 showed: nvidia-smi stopped listing the orphan while memory.used still held its 4614 MiB."""
    smi, count = smi_readings([
        ((24640, 0), [(A, 4614, 0), (B, 20000, 0)]),   # before: A's orphan and B's scheduler on GPU 0
        ((24640, 0), [(A, 4614, 0), (B, 20000, 0)]),   # A stopped, still listed
        ((24623, 0), [(B, 20000, 0)]),                 # no longer listed, its memory not back
        ((24623, 0), [(B, 20000, 0)]),
        ((20015, 0), [(B, 20000, 0)]),                 # back
    ])
    before = smi.reading()
    back = _nvidia.memory_back(smi, before, [A], timeout=10, interval=0.01)
    assert back["complete"] and back["listed"] == []
    assert back["gpus"] == [{"index": 0, "held_mib": 4614, "dropped_mib": 4625, "memory_used_mib": 20015}]
    assert count() == 5 and back["readings"] == 4 and back["after"]["gpus"][0]["memory_used_mib"] == 20015
    assert 0 < back["unlisted"] < back["waited"]


def test_memory_back_counts_out_what_neighbours_allocate_or_free(smi_readings):
    smi, count = smi_readings([
        ((30000, 8000), [(A, 10000, 0), (B, 20000, 0), (TORCH, 8000, 1)]),
        ((33000, 8000), [(B, 23000, 0), (TORCH, 8000, 1)]),   # B grew by 3000 MiB: A's memory not back yet
        ((23000, 0), [(B, 23000, 0)]),                        # A's back; the torch job on GPU 1 ended meanwhile
    ])
    back = _nvidia.memory_back(smi, smi.reading(), [A], timeout=10, interval=0.01)
    assert back["complete"] and count() == 3
    assert back["gpus"] == [{"index": 0, "held_mib": 10000, "dropped_mib": 10000, "memory_used_mib": 23000}]


def test_memory_back_gives_up_at_the_timeout_and_says_what_is_left(smi_readings):
    smi, count = smi_readings([
        ((24640, 0), [(A, 4614, 0), (B, 20000, 0)]),
        ((24623, 0), [(B, 20000, 0)]),
    ])
    # each reading runs nvidia-smi twice: 1.5 s leaves room for several on a loaded machine
    back = _nvidia.memory_back(smi, smi.reading(), [A], timeout=1.5, interval=0.05)
    assert not back["complete"] and 1.5 <= back["waited"] < 6 and count() > 3
    assert back["gpus"] == [{"index": 0, "held_mib": 4614, "dropped_mib": 17, "memory_used_mib": 24623}]
    # still listed: that is what it says
    smi, count = smi_readings([((24640, 0), [(A, 4614, 0)])])
    back = _nvidia.memory_back(smi, smi.reading(), [A, 999999], timeout=0.1, interval=0.05)
    assert not back["complete"] and back["listed"] == [A]


def test_memory_back_of_processes_that_held_no_memory_is_at_once(smi_readings):
    smi, count = smi_readings([((20000, 0), [(B, 20000, 0)])])
    back = _nvidia.memory_back(smi, smi.reading(), [A], timeout=10)
    assert back["complete"] and back["gpus"] == [] and count() == 2


def test_the_switch_release_waits_for_the_memory_too(run, devices, tmp_path, lagging_smi):
    from ansible_collections.inferops.sglang.plugins.module_utils._switch import worker as _switch_worker

    holder = run(programs.HOLDER, str(devices / "nvidia0"))[0]
    d = lagging_smi(holder.pid, 3)
    plan = dict(id="m", action="start", port=1, unit="sglang.service", unit_name="sglang", state_dir=str(tmp_path),
                drain=1.0, release_strays=False, devices=globs(devices))
    before = {"family": [{"pid": holder.pid, "starttime": _procfs.starttime(holder.pid)}], "strays": [], "gpus": [0]}
    detail = _switch_worker.Worker(plan, run=run_command).release(before)
    assert detail["released"] == [holder.pid] and holder.poll() is not None
    assert int((d / "gone").read_text()) >= 4, "returned before memory.used dropped"
    assert detail["memory_back"] is True and detail["memory_used_mib"] == {0: 20015}
    assert detail["memory_freed"] == [{"index": 0, "held_mib": 4614, "dropped_mib": 4625, "memory_used_mib": 20015}]
    assert detail["memory_wait"] > 0


def titled(title, *files):
    """A real process titled `title` (exec -a) holding files open."""
    redirs = " ".join("%d<%s" % (3 + i, f) for i, f in enumerate(files))
    p = subprocess.Popen(["bash", "-c", "exec %s -a %s sleep 600" % (redirs, title)], stdin=subprocess.DEVNULL)
    wait_for(lambda: _procfs.read(p.pid).cmdline.startswith(title))
    return p


def test_cuda_visible_devices_maps_the_servers_gpus():
    """Position i of CUDA_VISIBLE_DEVICES is the process's GPU i: numbers, and GPU UUIDs through nvidia-smi's map;
    unset, every GPU in order; what cannot be mapped (a MIG instance, an unknown UUID) is said, never guessed."""
    assert _nvidia.visible(None) is None
    assert _nvidia.visible("2,3,5,7") == [2, 3, 5, 7]
    assert _nvidia.visible("") == []
    assert _nvidia.visible("GPU-77ab,0", {"GPU-77ab": 1}) == [1, 0]
    for value in ("MIG-1234", "GPU-ffff"):
        with pytest.raises(ValueError) as e:
            _nvidia.visible(value, {"GPU-77ab": 1})
        assert "which nvidia-smi does not map to a GPU index here" in str(e.value)


def test_a_release_of_strays_never_leaves_the_plans_gpus(run, devices, tmp_path):
    """The worker looks again when it begins: what it finds then (more GPUs held by the family) does not widen the
    strays released beyond the GPUs the module's preflight attributed before anything ran (the plan's)."""
    from ansible_collections.inferops.sglang.plugins.module_utils._switch import worker as _switch_worker

    stray = run(programs.HOLDER, str(devices / "nvidia1"))[0]
    ident = {"pid": stray.pid, "starttime": _procfs.starttime(stray.pid), "releasable": True}
    before = {"family": [], "strays": [ident], "gpus": [0, 1]}
    plan = dict(id="m", action="switch", port=1, unit="sglang.service", unit_name="sglang", state_dir=str(tmp_path),
                drain=1.0, release_strays=True, devices=globs(devices), gpus=[0])
    detail = _switch_worker.Worker(plan, run=run_command).release(before)
    assert detail["released"] == [] and stray.poll() is None
    detail = _switch_worker.Worker(dict(plan, gpus=[1]), run=run_command).release(before)
    assert detail["released"] == [stray.pid] and stray.wait(timeout=15) is not None
