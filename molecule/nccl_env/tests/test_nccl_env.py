"""What the venv's interpreters really see, read on the host."""
import json
import os
import subprocess

PY = "/opt/sglang/venv/bin/python"
TRICKY = "it's \"quoted\", back\\slash, $HOME ${X} %h;\nsecond line\ttab ünïcode"
SHOW = "import os, json; print(json.dumps({k: os.environ.get(k) for k in %r}))"
KEYS = ["NCCL_PROTO", "NCCL_ALGO", "NCCL_P2P_LEVEL", "NCCL_IB_DISABLE", "NCCL_DEBUG", "INFEROPS_TRICKY"]


def show(host, prefix=""):
    return json.loads(host.check_output("%s %s -c %s" % (prefix, PY, _q(SHOW % (KEYS,)))))


def _q(s):
    return "'" + s.replace("'", "'\"'\"'") + "'"


def test_bare_interpreter_sees_profile_and_user_values_verbatim(host):
    assert show(host, "env -i") == {"NCCL_PROTO": "LL", "NCCL_ALGO": "Ring", "NCCL_P2P_LEVEL": "SYS",
                                    "NCCL_IB_DISABLE": "1", "NCCL_DEBUG": "WARN", "INFEROPS_TRICKY": TRICKY}


def test_explicit_environment_wins(host):
    assert show(host, "env -i NCCL_PROTO=Simple")["NCCL_PROTO"] == "Simple"


def test_python_S_skips_it_as_documented(host):
    out = host.check_output("env -i %s -S -c %s" % (PY, _q("import os; print(os.environ.get('NCCL_PROTO'))")))
    assert out == "None"


def test_the_venvs_own_sitecustomize_would_never_run_here(host):
    """Why a .pth: Debian's python imports /usr/lib/python3.X/sitecustomize.py, not the venv's."""
    site = host.check_output("%s -c 'import sysconfig; print(sysconfig.get_paths()[\"purelib\"])'" % PY)
    host.check_output("echo 'import os; os.environ[\"INFEROPS_SITECUSTOMIZE\"] = \"ran\"' > %s/sitecustomize.py" % site)
    try:
        assert host.file("/usr/lib/python3.11/sitecustomize.py").exists
        out = host.check_output("env -i %s -c %s" % (PY, _q("import os; print(os.environ.get('INFEROPS_SITECUSTOMIZE'))")))
        assert out == "None"
    finally:
        host.check_output("rm -f %s/sitecustomize.py" % site)


def test_absent_removes_exactly_what_it_added(host):
    """state=absent, run for real against this instance: the venv is back byte for byte."""
    inventory = os.environ["MOLECULE_INVENTORY_FILE"]
    play = os.path.join(os.environ["MOLECULE_SCENARIO_DIRECTORY"], "absent.yml")
    subprocess.run(["ansible-playbook", "-i", inventory, play], check=True, stdout=subprocess.DEVNULL)
    after = host.check_output("find /opt/sglang/venv/lib -type f -print0 | sort -z | xargs -0 sha256sum")
    assert after == host.file("/root/site-packages.before").content_string.strip()
    assert show(host, "env -i")["NCCL_PROTO"] is None


def test_the_owners_venv_was_asked_and_written_as_its_owner(host):
    """/opt/owned/venv is nobody's, with a .pth that logs the uid it runs as: every probe ran as nobody (never uid 0),
    and the role's .pth there is nobody's file."""
    uids = host.file("/tmp/inferops-pth-uids").content_string.split()
    assert uids and set(uids) == {"65534"}
    # found by its path: running the venv's python here (as root) would run the owner's .pth
    pth = host.file(host.check_output("ls /opt/owned/venv/lib/python3*/site-packages/inferops_nccl_env.pth"))
    assert pth.exists and pth.user == "nobody" and "NCCL_DEBUG" in pth.content_string


def test_nothing_was_written_through_the_linked_site_packages(host):
    assert host.check_output("ls -A /srv/outside") == ""
