"""The service heals itself, read on the host after the converge (the cutover, then a scheduler stopped and the
watchdog's restart): the hang's restart was the only one; the load, a 30-s prefill and a drain are never restarted;
the shared memory of a server that is gone went at the unit's starts, a live process's stayed; the caches the hand
launch filled are the unit's, across a host restart. In this order (pytest runs a file's tests in order)."""
import json
import os
import re
import subprocess
import time

from restart import active_again, restart  # pylint: disable=import-error
from serving import serves_from_its_unit  # pylint: disable=import-error

UNIT = "sglang-30000.service"

# Inside the host: POST /generate with a prompt of N words (a prefill of 10 ms a word in the double) and M new tokens
# (2 unless given), its status and seconds
GENERATE = r'''
import json, sys, time, urllib.request
tokens = int(sys.argv[2]) if len(sys.argv) > 2 else 2
body = json.dumps({"text": " ".join(["word"] * int(sys.argv[1])), "sampling_params": {"max_new_tokens": tokens}}).encode()
req = urllib.request.Request("http://127.0.0.1:30000/generate", data=body, headers={"Content-Type": "application/json"})
t0 = time.monotonic()
with urllib.request.urlopen(req, timeout=120) as r:
    print(json.dumps({"status": r.status, "seconds": time.monotonic() - t0}))
'''


def show(host, *props):
    out = host.check_output("systemctl show %s -p %s" % (UNIT, ",".join(props)))
    return dict(line.split("=", 1) for line in out.splitlines())


def journal(host):
    return host.check_output("journalctl -u %s --no-pager -o cat" % UNIT)


def segments(host):
    return host.check_output("ls /dev/shm").split()


def test_the_hang_was_the_only_restart_and_the_load_longer_than_the_watchdog_was_not_one(host):
    """The unit's load (25 s) is longer than its watchdog (15 s), twice (the cutover's start, the restart's): one
    restart in all, the watchdog's."""
    serves_from_its_unit(host)
    unit = host.file("/etc/systemd/system/" + UNIT).content_string.splitlines()
    assert "WatchdogSec=15" in unit and "NotifyAccess=all" in unit
    assert show(host, "NRestarts")["NRestarts"] == "1"
    text = journal(host)
    assert text.count("Watchdog timeout") == 1 and text.count("Failed with result 'watchdog'") == 1, text[-3000:]
    hang = json.loads(host.file("/root/hang.json").content_string)
    assert hang["restart_after"] < 60, hang
    assert text.count("liveness: watching /health_generate on port 30000 every 2 s and 2 scheduler(s)") == 2


def test_the_dead_servers_segments_went_at_the_units_starts_and_the_live_ones_stayed(host):
    """80 segments of a server that is gone (50 before the cutover, 30 before the watchdog's restart): none left. The
    live process's two (one with its pid in the name, one sglang_loads_* without), mapped: both still there."""
    now = segments(host)
    assert not [s for s in now if s.startswith("sgl_shm_") and "_40000" in s], now
    live = host.file("/root/held.txt").content_string.split()
    assert len(live) == 2 and set(live) <= set(now), (live, now)
    assert "sweep-shm" in journal(host)


def triton_cache(host):
    """Where the installed SGLang's server keeps Triton's kernels without TRITON_CACHE_DIR: 0.5.23 under its
    SGLANG_CACHE_DIR (~/.cache/sglang), earlier versions Triton's own ~/.triton/cache."""
    version = host.check_output("/opt/sglang/venv/bin/python -c 'import importlib.metadata as m; print(m.version(\"sglang\"))'")
    release = tuple(int(x) for x in version.split("+")[0].split(".")[:3])
    return "/root/.cache/sglang/triton" if release >= (0, 5, 23) else "/root/.triton/cache"


def test_the_unit_uses_the_caches_the_hand_launch_filled(host):
    main = show(host, "MainPID")["MainPID"]
    env = dict(v.split("=", 1) for v in host.file("/proc/%s/environ" % main).content_string.split("\0") if "=" in v)
    assert env.get("TRITON_CACHE_DIR") == triton_cache(host), env
    assert host.file(env["TRITON_CACHE_DIR"] + "/abc/kernel.cubin").content_string == "kernel\n"
    assert env.get("TORCHINDUCTOR_CACHE_DIR", "").startswith("/root/.cache/"), env


def test_a_prefill_longer_than_the_watchdog_is_not_restarted(host):
    """A 3000-word prompt: a 30-s prefill, /health_generate unanswered all along (SGLang's 2-s timeout), twice the
    watchdog: the schedulers are busy, so the checker feeds the watchdog and the request completes."""
    before = show(host, "NRestarts")["NRestarts"]
    got = json.loads(host.check_output("/usr/bin/python3 -c %s 3000" % _quote(GENERATE)))
    assert got["status"] == 200 and got["seconds"] >= 30, got
    assert show(host, "NRestarts", "ActiveState") == {"NRestarts": before, "ActiveState": "active"}
    assert "but every scheduler is busy: not restarted" in journal(host)


def test_a_drain_longer_than_the_watchdog_is_not_restarted(host):
    """A long generation in flight (12000 tokens, about 25 s), then the unit's stop: SGLang drains it (its /health 503
    meanwhile), longer than the watchdog; systemd stops the watchdog with the stop: the stop succeeds, no watchdog
    result. Started again after. (A generation, not a prefill: a server whose health check failed, as it does during
    a long prefill, skips its drain at a SIGTERM, as the real one does.)"""
    host.run("nohup /usr/bin/python3 -c %s 1 12000 > /root/drained.json 2>&1 &" % _quote(GENERATE))
    time.sleep(3)
    t0 = time.monotonic()
    assert host.run("systemctl stop %s" % UNIT).rc == 0
    stopped_after = time.monotonic() - t0
    assert stopped_after >= 15, "the stop drained the request in flight (%.1f s)" % stopped_after
    assert show(host, "Result")["Result"] == "success"
    assert json.loads(host.file("/root/drained.json").content_string)["status"] == 200
    assert journal(host).count("Watchdog timeout") == 1, "only the hang's"
    assert host.run("systemctl start %s" % UNIT).rc == 0
    serves_from_its_unit(host)


def test_a_sigkill_of_the_running_server_is_restarted_and_counted_as_the_unit_ends_it(host):
    """A kill -9 of the server (as the OOM killer's): SuccessExitStatus=SIGKILL makes it a clean end (SGLang ends its
    own drained stop so), RestartForceExitStatus=SIGKILL restarts it; the status counts it under systemd's result,
    `success`, beside the hang's `watchdog`. The unit has started three times this hour (the cutover, the watchdog's
    restart, the start after the drain): its start limit (three an hour) is reset first, as an operator would."""
    host.check_output("systemctl reset-failed %s" % UNIT)
    before = int(show(host, "NRestarts")["NRestarts"])
    host.check_output("kill -9 %s" % show(host, "MainPID")["MainPID"])
    time.sleep(1)
    assert active_again(host, UNIT, 120) == "active"
    serves_from_its_unit(host)
    assert int(show(host, "NRestarts")["NRestarts"]) == before + 1
    out = " ".join(subprocess.run(
        ["ansible-playbook", "-i", os.environ["MOLECULE_INVENTORY_FILE"],
         os.path.join(os.environ["INFEROPS_ROOT"], "playbooks", "status.yml")],
        check=True, stdout=subprocess.PIPE, universal_newlines=True).stdout.split())
    assert "restart(s) by systemd (success 1, watchdog 1)" in out and re.search(r"the last at [^,]+, success", out), out


def test_after_a_host_restart_it_serves_with_its_caches(host):
    assert restart(host.backend.get_hostname()) == 0
    assert active_again(host, UNIT, 150) == "active"
    serves_from_its_unit(host)
    test_the_unit_uses_the_caches_the_hand_launch_filled(host)
    assert show(host, "NRestarts")["NRestarts"] == "0", "the boot's start, no restart"


def _quote(text):
    return "'" + text.replace("'", "'\"'\"'") + "'"
