"""Items 8 and 7 of issue 33, on the host after the converge: nobody's look-alikes beside the owner's server were
never signalled by the switch; the owner's server runs as its unit, as the owner; its keys are in no job output,
also not at -vvv with --diff, and in no world-readable file."""
import json
import os
import subprocess

import yaml

SCENARIO = os.environ.get("MOLECULE_SCENARIO_DIRECTORY", os.path.dirname(os.path.dirname(__file__)))
V = yaml.safe_load(open(os.path.join(SCENARIO, "vars", "scenario.yml")))
UNIT = "sglang-30002.service"
KEYS = (V["api_key"], V["admin_api_key"])


def test_nobodys_look_alikes_live_on(host):
    before = host.file("/root/nobody-before.txt").content_string.splitlines()
    now = host.check_output("ps -u nobody -o pid=,lstart=,args=").splitlines()
    kin = [line for line in before if "sglang::scheduler_TP0" in line or "multiprocessing.spawn" in line]
    assert len(kin) == 2 and all(line in now for line in kin), (kin, now)


def test_the_owners_server_runs_as_its_unit_as_the_owner(host):
    assert host.service(UNIT).is_running
    main = host.check_output("systemctl show -p MainPID --value %s" % UNIT)
    assert host.check_output("ps -o user= -p %s" % main) == V["owner"]


def test_the_keys_are_in_no_task_output():
    log = open(os.path.join(os.environ["MOLECULE_EPHEMERAL_DIRECTORY"], "ansible.log")).read()
    assert "Record - summary" in log and "********" in log, "the log holds the cutover's output, masked"
    for key in KEYS:
        assert key not in log


def test_the_switch_at_vvv_with_diff_shows_no_key():
    """sglang_switch called as a playbook might (its command not masked), in check and diff mode, at -vvv: the
    arguments it shows and its result hold no key."""
    eph = os.environ["MOLECULE_EPHEMERAL_DIRECTORY"]
    command = ["%s/bin/python" % V["venv"], "-m", "sglang.launch_server", "--model-path", "/models/tiny-llama",
               "--port", "30002", "--api-k", V["api_key"], "--admin-api-key=" + V["admin_api_key"]]
    args = dict(port=30002, unit="sglang-30002", command=command, executable=command[0])
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(eph, "ansible.cfg"), ANSIBLE_INJECT_INVOCATION="true")
    env.pop("ANSIBLE_LOG_PATH", None)
    p = subprocess.run(["ansible", "-i", os.path.join(eph, "inventory"), "security", "-vvv", "--check", "--diff",
                        "-m", "inferops.sglang.sglang_switch", "-a", json.dumps(args)], env=env,
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True, check=False,
                       timeout=300)
    assert '"module_args"' in p.stdout and "sglang-30002.service" in p.stdout, p.stdout[-3000:]
    for key in KEYS:
        assert key not in p.stdout


def test_the_keys_are_in_no_world_readable_file(host):
    unit = host.file("/etc/systemd/system/" + UNIT).content_string
    assert "${INFEROPS_API_KEY}" in unit and "${INFEROPS_ADMIN_API_KEY}" in unit
    for key in KEYS:
        # not /home: the owner's own log is theirs (SGLang 0.5.5-0.5.15 log their arguments, the key among them)
        found = host.run("grep -rlsF -- %s /etc /var /root /opt /tmp /run /usr/local" % key).stdout.split()
        readable = [f for f in found if host.file(f).mode & 0o004]
        assert not readable, readable
