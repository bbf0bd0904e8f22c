"""gpu_release's manager on real holders of stand-in device files: query and check mode, its refusals, the wait for
the memory back."""
import pytest

from ansible_collections.inferops.sglang.plugins.module_utils._manager_gpu_release import GpuRelease

from .conftest import Exited, Failed, ProcessModule as Module, exited, globs
from . import programs


def test_gpu_release_query_and_check_mode_touch_nothing(run, devices, decoy, monkeypatch):
    monkeypatch.setenv("PATH", "/usr/bin:/bin")  # no nvidia-smi: the device files alone decide
    holder = run(programs.HOLDER, str(devices / "nvidia0"), str(devices / "nvidiactl"))[0]
    ctl_only = run(programs.HOLDER, str(devices / "nvidiactl"))[0]
    r = exited(GpuRelease(Module(state="query", devices=globs(devices))))
    assert not r["changed"] and r["msg"] == "3 holder(s), 1 target(s)" and not r["nvidia_smi"]
    assert r["nvidia_smi_note"].startswith("nvidia-smi not found") and "before" not in r
    assert [t["pid"] for t in r["targets"]] == [holder.pid] and [s["pid"] for s in r["shared_only"]] == [ctl_only.pid]
    assert [(x["pid"], x["reason"]) for x in r["protected"]] == [(decoy.pid, "protected (nvidia-persistenced)")]
    r = exited(GpuRelease(Module(check_mode=True, diff=True, devices=globs(devices))))
    assert r["changed"] and r["msg"] == "would release 1 process(es)" and "released" not in r
    assert r["diff"]["before"].startswith("%d " % holder.pid) and str(devices / "nvidia0") in r["diff"]["before"]
    assert holder.poll() is None and ctl_only.poll() is None and decoy.poll() is None
    r = exited(GpuRelease(Module(devices=globs(devices), grace=5)))
    assert r["changed"] and [x["pid"] for x in r["released"]] == [holder.pid] and r["msg"] == "released 1 process(es)"
    assert "memory" not in r and holder.wait(timeout=10) == -15 and ctl_only.poll() is None and decoy.poll() is None


def test_gpu_release_refuses_negative_gpus_and_a_failing_nvidia_smi(run, devices, tmp_path, monkeypatch):
    holder = run(programs.HOLDER, str(devices / "nvidia0"))[0]
    with pytest.raises(Failed, match=r"gpus are indices: 0, 1, \.\.\."):
        GpuRelease(Module(devices=globs(devices), gpus=[0, -1])).run()
    smi = tmp_path / "smi-bin" / "nvidia-smi"
    smi.parent.mkdir()
    smi.write_text("#!/bin/sh\necho 'NVIDIA-SMI has failed because it could not communicate' >&2\nexit 9\n")
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", "%s:/usr/bin:/bin" % smi.parent)
    with pytest.raises(Failed) as e:
        GpuRelease(Module(devices=globs(devices))).run()
    r = e.value.args[0]
    assert r["msg"] == "reading nvidia-smi failed: nvidia-smi failed (rc 9): NVIDIA-SMI has failed because it could not communicate"
    assert r["nvidia_smi"] and [t["pid"] for t in r["targets"]] == [holder.pid] and not r["changed"]
    assert holder.poll() is None, "nothing was stopped"


def test_gpu_release_returns_once_the_memory_is_back(run, devices, lagging_smi):
    holder = run(programs.HOLDER, str(devices / "nvidia0"), str(devices / "nvidiactl"))[0]
    d = lagging_smi(holder.pid, 3)
    with pytest.raises(Exited) as e:
        GpuRelease(Module(devices=globs(devices))).run()
    r = e.value.args[0]
    assert not r.get("failed"), r["msg"]
    assert [t["pid"] for t in r["released"]] == [holder.pid]
    assert r["before"]["compute_apps"][1] == {"pid": holder.pid, "name": "python3", "used_memory_mib": 4614, "gpu": 0}
    assert int((d / "gone").read_text()) >= 4, "returned before memory.used dropped"
    assert r["after"]["gpus"] == [{"index": 0, "memory_used_mib": 20015}]
    assert r["memory"]["gpus"] == [{"index": 0, "held_mib": 4614, "dropped_mib": 4625, "memory_used_mib": 20015}]
    assert 0 < r["memory"]["unlisted"] < r["memory"]["waited"] <= r["memory_released_after"]
    assert r["memory"]["readings"] >= 4


def test_gpu_release_fails_when_the_memory_is_not_back_in_time(run, devices, lagging_smi):
    holder = run(programs.HOLDER, str(devices / "nvidia0"))[0]
    lagging_smi(holder.pid, 10 ** 6)
    with pytest.raises(Exited) as e:
        GpuRelease(Module(devices=globs(devices), timeout=0.5)).run()
    r = e.value.args[0]
    assert r["failed"] and r["changed"] and holder.poll() is not None
    assert r["msg"] == ("GPU memory of released processes is not back after 0.5 s: "
                        "GPU 0 dropped 0 of the 4614 MiB they held")
