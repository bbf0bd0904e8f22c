"""cutover_mode adopt on real systemd, in order: adopted with no failed probe; the stop of the scope ends the whole
family; a crash's takeover by the service; a restart of the host; a later switch."""
import json
import os
import subprocess
import time

from restart import restart  # pylint: disable=import-error

UNIT = "sglang-30000.service"
SCOPE = "sglang-30000-adopted.scope"
WATCHER = "sglang-30000-adopted-watch.service"
STATE = "/var/lib/inferops/cutover/30000"
ROOT = os.environ["INFEROPS_ROOT"]
INVENTORY = os.environ["MOLECULE_INVENTORY_FILE"]
LAUNCH = ("cd /root; SGLANG_DOUBLE_LOAD_SECONDS=2 SGLANG_DOUBLE_WARMUP_SECONDS=1 SGLANG_DOUBLE_FAULTS=untitled_orphan "
          "SGLANG_DOUBLE_DEVICES='/dev/nvidia*' nohup /opt/sglang/venv/bin/python -m sglang.launch_server "
          "--model-path /models/tiny-llama --tp 2 --port 30000 > /root/sglang.log 2>&1 < /dev/null &")
MODELS = ("python3 -c \"import urllib.request as u; print(u.urlopen('http://127.0.0.1:30000/v1/models', timeout=10)"
          ".status)\"")


def note(**numbers):
    """What was measured, for the report (tests/output/inplace-numbers.jsonl)."""
    with open(os.path.join(ROOT, "tests", "output", "inplace-numbers.jsonl"), "a") as f:
        f.write(json.dumps(numbers) + "\n")


def playbook(name, *extra):
    return subprocess.run(["ansible-playbook", "-i", INVENTORY, os.path.join(ROOT, "playbooks", name)] + list(extra),
                          check=True, stdout=subprocess.PIPE, universal_newlines=True).stdout


def listener(host):
    return int(host.check_output("ss -Htlnp 'sport = :30000' | grep -o 'pid=[0-9]*' | head -1 | cut -d= -f2"))


def in_scope(host, pid):
    return SCOPE in host.file("/proc/%d/cgroup" % pid).content_string


def scope_pids(host):
    cg = host.check_output("systemctl show -p ControlGroup --value %s" % SCOPE)
    for base in ("/sys/fs/cgroup/unified", "/sys/fs/cgroup/systemd", "/sys/fs/cgroup"):
        f = host.file(base + cg + "/cgroup.procs")
        if f.exists:
            return [int(p) for p in f.content_string.split()]
    raise AssertionError("no cgroup.procs for %s" % cg)


def alive(host, pid):
    return host.run("test -d /proc/%d && ! grep -q '^State:.Z' /proc/%d/status" % (pid, pid)).rc == 0


def serves(host, seconds=60):
    deadline = time.monotonic() + seconds
    while host.run(MODELS).stdout.strip() != "200":
        assert time.monotonic() < deadline, "nothing serves port 30000"
        time.sleep(0.5)


def launch_and_adopt(host):
    """A plain nohup launch (the service stopped first), adopted by a cutover run in adopt mode."""
    host.run("systemctl stop %s" % UNIT)
    host.check_output(LAUNCH)
    serves(host)
    playbook("cutover.yml")
    assert in_scope(host, listener(host))


def test_adopted_in_place_the_same_processes_in_the_scope(host):
    pid, start = host.file("/root/server-before.txt").content_string.split()
    assert listener(host) == int(pid) and host.file("/proc/%s/stat" % pid).content_string.split()[21] == start
    record = json.loads(host.file(STATE + "/last.json").content_string)
    assert record["action"] == "adopt" and record["adopted"]["scope"] == SCOPE and record["adopted"]["pid"] == int(pid)
    assert record["adopted"]["log"] == "/root/sglang.log"
    family = record["old"]["family"]
    assert len(family) >= 4 and all(in_scope(host, p) for p in family)  # server, schedulers, detokenizer, orphan
    assert sorted(family) == sorted(scope_pids(host))
    assert host.service(WATCHER).is_running
    assert host.service(UNIT).is_enabled and not host.service(UNIT).is_running
    assert host.run("pgrep -f 'while true'").rc == 1, "the wrapper loop would start a second copy"
    assert json.loads(host.file(STATE + "/capture.json").content_string)["wrapper"], "the capture keeps the loop"
    assert host.check_output("pgrep -c -f '[s]glang.launch_server'") == "1"


def test_no_failed_probe_during_the_adoption(host):
    host.check_output("kill $(cat /root/prober.pid); while kill -0 $(cat /root/prober.pid) 2>/dev/null; do sleep 0.1; done")
    counts = json.loads(host.file("/root/probe.json").content_string)
    note(probes_ok=counts["ok"], probes_failed=counts["failed"], probes_slowest=counts["slowest"])
    assert counts["failed"] == 0, (counts["errors"], "slowest (seconds, began)", counts["slowest"])
    assert counts["ok"] > 100


def test_status_says_adopted(host):
    out = " ".join(playbook("status.yml").split())  # however the callback wraps it
    assert "in %s since" % SCOPE in out and "enabled for its next start" in out and "/root/sglang.log" in out


def test_the_stop_of_the_scope_drains_and_ends_the_whole_family(host):
    pids = scope_pids(host)
    server = listener(host)
    orphans = [p for p in pids if host.check_output("ps -o sid= -p %d" % p) != host.check_output("ps -o sid= -p %d" % server)]
    assert orphans, "the escaped orphan is in the scope"
    host.check_output("systemctl stop %s" % SCOPE)
    assert [p for p in pids if alive(host, p)] == []
    time.sleep(1)
    assert not host.service(UNIT).is_running, "a stop is no crash: the service does not take over"
    assert host.run("ss -Htln 'sport = :30000'").stdout.strip() == ""


def test_a_crash_of_the_adopted_server_the_service_takes_over(host):
    launch_and_adopt(host)
    killed = float(host.check_output("python3 -c \"import time; print(time.monotonic())\"; kill -9 %d" % listener(host)))
    serves(host)
    ready = float(host.check_output("python3 -c \"import time; print(time.monotonic())\""))
    # the takeover begins when the unit leaves inactive (its start job runs); its main process starts after its
    # ExecStartPre (the shared-memory sweep)
    began, main = (int(host.check_output("systemctl show -p %s --value %s" % (p, UNIT))) / 1e6
                   for p in ("InactiveExitTimestampMonotonic", "ExecMainStartTimestampMonotonic"))
    note(takeover_sec=round(began - killed, 3), main_started_sec=round(main - killed, 3),
         kill_to_serving_sec=round(ready - killed, 3))
    assert 0 < began - killed < 1.0, "the takeover began %.2f s after the kill" % (began - killed)
    assert began <= main < ready
    assert in_scope(host, listener(host)) is False and host.check_output("pgrep -c -f '[s]glang.launch_server'") == "1"
    assert host.run("systemctl is-active %s" % SCOPE).stdout.strip() != "active"


def test_a_restart_of_the_host_the_service_one_server(host):
    launch_and_adopt(host)
    assert restart("inplace") == 0
    deadline = time.monotonic() + 90
    while subprocess.run(["ansible", "-i", INVENTORY, "all", "-m", "ansible.builtin.ping"], stdout=subprocess.DEVNULL,
                         check=False).returncode:
        assert time.monotonic() < deadline
        time.sleep(1)
    serves(host)
    main = int(host.check_output("systemctl show -p MainPID --value %s" % UNIT))
    assert listener(host) == main and host.check_output("pgrep -c -f '[s]glang.launch_server'") == "1"


def test_a_later_switch_moves_the_adopted_server_into_the_service(host):
    host.run("touch /dev/nvidia0 /dev/nvidia1 /dev/nvidiactl /dev/nvidia-uvm")  # gone with the restart
    launch_and_adopt(host)
    playbook("cutover.yml", "-e", "cutover_mode=switch")
    main = int(host.check_output("systemctl show -p MainPID --value %s" % UNIT))
    assert listener(host) == main and host.check_output("pgrep -c -f '[s]glang.launch_server'") == "1"
    assert host.check_output("systemctl show -p NRestarts --value %s" % UNIT) == "0"
    record = json.loads(host.file(STATE + "/last.json").content_string)
    assert record["action"] == "switch" and record["downtime_switch_sec"] < 15
    assert "active" not in host.run("systemctl is-active %s %s" % (SCOPE, WATCHER)).stdout.split()
