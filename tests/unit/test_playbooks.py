"""The playbooks as an operator runs them: every stage's tag of the cutover reachable from cutover.yml
(`--list-tags`), and `--check --tags discover` running the input checks and the discovery alone. Run by
ansible-playbook on this machine (connection local) against a port nothing listens on, with a state folder of the
test's own: the discovery writes nothing, and nothing else runs."""
import os
import re
import subprocess
import sys

from tests.unit.conftest import COLLECTIONS

STAGE_TAGS = {"discover", "plan", "prepare", "preflight", "switch", "verify", "adopt", "record"}


def playbook(*args, cwd):
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=COLLECTIONS, ANSIBLE_LOCALHOST_WARNING="false",
               ANSIBLE_INVENTORY_UNPARSED_WARNING="false", ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0")
    p = subprocess.run([os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), "-i", "localhost,",
                        "-c", "local", "-e", "cutover_hosts=localhost", "-e", "ansible_python_interpreter=" + sys.executable,
                        "inferops.sglang.cutover"] + list(args), env=env, stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, universal_newlines=True, check=False, cwd=str(cwd), timeout=300)
    return p.returncode, p.stdout


def ran(output):
    """The names of the tasks that ran (ok or changed on a host; not skipped), in order."""
    names, current = [], None
    for line in output.splitlines():
        m = re.match(r"^TASK \[(.*)\] \**$", line)
        if m:
            current = re.sub(r"^inferops\.sglang\.\w+ : ", "", m.group(1))
        elif current and re.match(r"^(ok|changed|fatal): \[", line):
            names.append(current)
            current = None
    return names


def test_every_stage_tag_is_listed(tmp_path):
    rc, out = playbook("--list-tags", cwd=tmp_path)
    assert rc == 0, out[-3000:]
    listed = set(re.search(r"TASK TAGS: \[(.*)\]", out).group(1).replace(" ", "").split(","))
    assert STAGE_TAGS <= listed, listed


def test_check_tags_discover_runs_the_checks_and_the_discovery_alone(tmp_path):
    state = tmp_path / "state"
    rc, out = playbook("--check", "--tags", "discover", "-e", "cutover_port=39999", "-e", "cutover_state_dir=%s" % state,
                       "-e", '{"cutover_command": ["/opt/sglang/venv/bin/python", "-m", "sglang.launch_server"]}',
                       cwd=tmp_path)
    assert rc == 0, out[-3000:]
    names = ran(out)
    discover = [n for n in names if n.startswith("Discover - ")]
    others = [n for n in names if not n.startswith("Discover - ")]
    assert len(discover) >= 2, names
    assert [n for n in others if not (n.startswith("Validating arguments against arg spec 'main'")
                                      or n.startswith("Check the inputs")
                                      or n.startswith("The servers of cutover_ports"))] == [], names
    assert not state.exists()  # check mode, and the discovery writes nothing
