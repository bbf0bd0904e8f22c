"""After the cutover, read on each host: processes, /proc cmdline and environ, unit files, HTTP answers, the
records; decoys untouched; no api key where it must not be; then the host restarts and serves again, once."""
import base64
import json
import os
import time

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from reference import record_fields  # pylint: disable=import-error
from restart import active_again, restart  # pylint: disable=import-error

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

SCENARIO = os.environ.get("MOLECULE_SCENARIO_DIRECTORY", os.path.dirname(os.path.dirname(__file__)))
V = yaml.safe_load(open(os.path.join(SCENARIO, "vars", "scenario.yml")))
UNIT = "sglang-30000.service"
STATE = "/var/lib/inferops/cutover/30000"
METRICS = "/var/lib/node_exporter/textfile_collector"

# Inside the host: the status of a GET (with the api key where the host has one).
GET = r'''
import sys, urllib.request, urllib.error
req = urllib.request.Request("http://127.0.0.1:%s%s" % (sys.argv[1], sys.argv[2]))
if len(sys.argv) > 3:
    req.add_header("Authorization", "Bearer " + sys.argv[3])
try:
    with urllib.request.urlopen(req, timeout=30) as r:
        print(r.status, r.read().decode()[:2000])
except urllib.error.HTTPError as e:
    print(e.code)
except OSError:
    print(0)
'''


def name(host):
    return host.backend.get_hostname()


def get(host, path, port=30000):
    key = [V["api_key"]] if name(host) == "messy" and port == 30000 else []
    out = host.check_output(" ".join(["python3", "-c", quote(GET), str(port), path] + key))
    code, dummy, body = out.partition(" ")
    return int(code), body


def quote(s):
    return "'" + s.replace("'", "'\"'\"'") + "'"


def show(host, *props):
    out = host.check_output("systemctl show %s --property=%s" % (UNIT, ",".join(props)))
    return dict(line.split("=", 1) for line in out.splitlines())


def nul_list(host, path):
    return [x.decode() for x in base64.b64decode(host.check_output("base64 -w0 %s" % path)).split(b"\0")[:-1]]


def servers(host, port):
    """Main processes of launch_server on the port (by their command line)."""
    out = host.run("pgrep -f -- 'sglang.launch_server.*--port %d'" % port).stdout.split()
    return [int(p) for p in out if host.run("test -d /proc/%s" % p).rc == 0
            and "pgrep" not in host.file("/proc/%s/cmdline" % p).content_string]


def test_service_serves_the_model_it_served_before(host):
    assert show(host, "ActiveState", "UnitFileState") == {"ActiveState": "active", "UnitFileState": "enabled"}
    code, body = get(host, "/v1/models")
    assert code == 200
    assert json.loads(body)["data"][0]["id"] == ("tiny" if name(host) == "messy" else "/models/tiny-llama")
    assert get(host, "/health")[0] == 200


def test_the_unit_wants_and_starts_after_nvidia_persistenced_where_the_host_has_it(host):
    deps = dict((k, v.split()) for k, v in show(host, "Wants", "After").items())
    has_it = name(host) == "messy"  # only the messy host runs the daemon
    assert ("nvidia-persistenced.service" in deps["Wants"]) == has_it
    assert ("nvidia-persistenced.service" in deps["After"]) == has_it and "network-online.target" in deps["After"]


def test_exactly_one_server_on_the_port_and_it_is_the_units(host):
    (pid,) = servers(host, 30000)
    assert int(show(host, "MainPID")["MainPID"]) == pid
    assert UNIT in host.file("/proc/%d/cgroup" % pid).content_string
    titled = host.check_output("pgrep -c -f '^sglang::scheduler' || true")
    assert int(titled) == (4 if name(host) == "messy" else 2)  # the decoy server's two are on the messy host
    assert host.run("pgrep -f run-sglang.sh").rc == 1, "the wrapper loop is gone"


def test_the_unit_runs_what_ran_with_argv0_as_the_shell_resolved_it(host):
    pid = int(show(host, "MainPID")["MainPID"])
    argv = nul_list(host, "/proc/%d/cmdline" % pid)
    assert argv[0] == "/opt/sglang/venv/bin/python"
    assert argv[1:5] == ["-m", "sglang.launch_server", "--model-path", "/models/tiny-llama"]
    env = dict(x.split("=", 1) for x in nul_list(host, "/proc/%d/environ" % pid))
    assert env["SGLANG_DOUBLE_LOAD_SECONDS"] == V["load_seconds"]
    for noise in ("PWD", "SHLVL", "OLDPWD", "SSH_CONNECTION", "SSH_CLIENT", "_"):
        assert noise not in env, noise
    environment_file = host.file("/etc/inferops/sglang/sglang-30000.env")
    assert environment_file.mode == 0o600 and "SSH_CONNECTION" not in environment_file.content_string
    if name(host) == "messy":
        assert env["VIRTUAL_ENV"] == "/opt/sglang/venv" and env["PATH"].startswith("/opt/sglang/venv/bin:")
        assert argv[argv.index("--api-key") + 1] == V["api_key"]
        assert host.file("/proc/%d/cwd" % pid).linked_to == "/root"


def test_capture_and_records(host):
    assert host.file(STATE).mode == 0o700
    capture = host.file(STATE + "/capture.json")
    assert capture.mode == 0o600 and capture.user == "root"
    cap = json.loads(capture.content_string)
    assert cap["argv0_resolved"] == "/opt/sglang/venv/bin/python"
    record = json.loads(host.file(STATE + "/last.json").content_string)
    assert record["action"] == "switch" and record["unit"] == UNIT
    assert record["downtime_switch_sec"] > 0 and record["load_sec"] > 0
    assert set(record["stages_sec"]) == {"discover", "unit", "switch", "verify"}
    assert all(v > 0 for v in record["stages_sec"].values()) and record["stages_sec"]["verify"] >= record["load_sec"]
    steps = ["stop wrapper", "stop server", "verify zero", "release GPUs", "start unit"]
    assert [s["step"] for s in record["steps"]] == steps
    assert record["old"]["pid"] == cap["pid"] and record["generated"]
    report = host.file(STATE + "/last.md").content_string
    assert "# Cutover of port 30000" in report and "downtime" in report
    switch = json.loads(host.file(STATE + "/switch.json").content_string)
    assert switch["finished"] and switch["error"] is None


def test_every_field_of_the_record_is_in_the_record_reference(host):
    """docs/record.md documents every field this run's record holds, and this record holds each of its fields."""
    text = host.file(STATE + "/last.json").content_string
    kept = os.path.join(ROOT, "tests", "output", "records")  # the reference's example is such a record
    os.makedirs(kept, exist_ok=True)
    with open(os.path.join(kept, "cutover-%s.json" % name(host)), "w") as f:
        f.write(text)
    record, fields = json.loads(text), record_fields.documented()["cutover"]
    assert len(fields) > 30
    assert record_fields.undocumented(record, fields) == []
    # every field, but a rank's of a multi-node server (molecule/multinode holds records with it)
    assert sorted(f for f in fields if "." not in f and "[]" not in f and f not in record) == ["group"]


def test_the_metrics_file_parses_and_says_what_the_record_says(host):
    prom = host.file(METRICS + "/inferops_sglang_30000.prom")
    assert (prom.mode, prom.user, prom.group) == (0o644, "root", "root")
    assert host.check_output("ls -A %s" % METRICS).split() == ["inferops_sglang_30000.prom"]  # no temporary left
    record = json.loads(host.file(STATE + "/last.json").content_string)
    samples = dict((f.name, f.samples) for f in text_string_to_metric_families(prom.content_string))
    (info,) = samples["inferops_sglang_info"]
    assert info.labels == {"port": "30000", "unit": UNIT, "version": record["sglang_version"],
                           "model": record["model"], "mode": "switch"} and info.value == 1
    assert [s.value for s in samples["inferops_sglang_last_cutover_timestamp_seconds"]] == [record["time"]]
    assert [s.value for s in samples["inferops_sglang_last_downtime_seconds"]] == [record["downtime_until_ready_sec"]]
    assert [s.value for s in samples["inferops_sglang_last_load_seconds"]] == [record["load_sec"]]
    assert dict((s.labels["result"], s.value) for s in samples["inferops_sglang_last_result"]) == {
        "success": 1, "rolled_back": 0}


def test_the_record_says_how_much_of_the_model_the_page_cache_held_and_what_the_warm_read(host):
    cache = json.loads(host.file(STATE + "/last.json").content_string)["model_cache"]
    assert "- %s\n" % cache["summary"] in host.file(STATE + "/last.md").content_string and "paths" not in cache
    if name(host) == "messy":  # its model folder holds a tokenizer, no weights
        assert cache["files"] == 0 and "no weight files" in cache["msg"] and "/models/tiny-llama" in cache["msg"]
        return
    size = V["model_bytes"]
    assert cache["files"] == 1 and cache["bytes"] == size and cache["resident"] < size  # the prepare evicted them
    warm = cache["warm"]  # model_prewarm's, under async: discovery itself only planned it
    assert warm["errors"] == [] and warm["stopped"] is None and warm["read"] >= size - cache["resident"]
    assert not host.file(STATE + "/prewarm.jsonl").exists  # its progress file went with it
    assert warm["resident_before"] == cache["resident"] and warm["resident_after"] == size
    assert cache["summary"].startswith("model: 4.2 MB in 1 file, ") and "100 % resident after" in cache["summary"]


def test_decoys_alive_and_untouched(host):
    """Everything that ran before and is not the server's family still runs, with the same start time."""
    before = host.file("/root/before.txt").content_string.splitlines()
    now = set(host.check_output("ps -e -o pid=,lstart=,args=").splitlines())
    family = ("sglang.launch_server --model-path /models/tiny-llama", "sglang::", "spawn_main", "resource_tracker",
              "run-sglang.sh", "ssh", "sleep 1", "ps -e", "python3 -c", "/bin/sh -c", "systemd-")
    kept = [line for line in before if not any(f in line for f in family) and not line.endswith("/usr/bin/python3")]
    if name(host) == "messy":
        other = [line for line in before if "--port 30001" in line]
        assert len(other) == 1 and other[0] in now, "the second server"
        for decoy in ("tail -f /root/sglang.log", "less /root/sglang.log", "watch pgrep", "nvidia-persistenced"):
            assert [line for line in kept if decoy in line], decoy
    missing = [line for line in kept if line not in now]
    assert not missing, missing
    if name(host) == "messy":
        assert get(host, "/health", 30001)[0] == 200


@pytest.mark.hosts("messy")
def test_boot_launchers_disabled_with_a_backup(host):
    crontab = host.file("/var/spool/cron/crontabs/root")
    assert crontab.mode == 0o600 and crontab.group == "crontab"
    lines = crontab.content_string.splitlines()
    assert "@reboot /root/run-sglang.sh >> /root/sglang.log 2>&1" not in lines
    assert [x for x in lines if x.startswith("# disabled by inferops.sglang") and x.endswith("@reboot /root/run-sglang.sh >> /root/sglang.log 2>&1")]
    assert "17 3 * * * /usr/bin/true" in lines
    backup = host.file(STATE + "/boot-launchers/_var_spool_cron_crontabs_root")
    assert backup.mode == 0o600 and "\n@reboot /root/run-sglang.sh" in backup.content_string


@pytest.mark.hosts("messy")
def test_the_api_key_is_in_no_record_and_no_world_readable_file(host):
    key = V["api_key"]
    unit = host.file("/etc/systemd/system/%s" % UNIT).content_string
    assert key not in unit and "${INFEROPS_API_KEY}" in unit
    for path in (STATE + "/last.json", STATE + "/last.md", STATE + "/switch.json"):
        assert key not in host.file(path).content_string, path
    found = host.run("grep -rlsF -- %s /etc /var /root /opt /tmp /run /usr/local" % key).stdout.split()
    assert STATE + "/capture.json" in found and "/etc/inferops/sglang/sglang-30000.env" in found
    readable = [f for f in found if host.file(f).mode & 0o004 and f != "/root/run-sglang.sh"]
    assert not readable, readable


@pytest.mark.hosts("plain")  # the log is the controller's: once is enough
def test_the_api_key_is_in_no_task_output(host):
    assert name(host) == "plain"
    key = V["api_key"]
    log = os.path.join(os.environ["MOLECULE_EPHEMERAL_DIRECTORY"], "ansible.log")
    text = open(log).read()
    assert "Record - summary" in text and "api-key ********" in text, "the log holds the cutover's output"
    assert key not in text


def test_the_host_restarts_and_serves_again_once(host):
    """Last: restart the container; the service comes back ready; no second copy (the @reboot line is off)."""
    assert restart(name(host)) == 0
    assert active_again(host, UNIT) == "active"
    assert get(host, "/health")[0] == 200
    time.sleep(3)  # cron's @reboot jobs run at its start: give a second copy the time to show
    assert len(servers(host, 30000)) == 1
    assert host.run("pgrep -f run-sglang.sh").rc == 1
