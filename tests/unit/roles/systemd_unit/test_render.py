"""The systemd_unit role's render entry point (roles/systemd_unit/tasks/render.yml and its template), run by
ansible-playbook on this machine against values a server's owner controls (the captured cwd, --host, --port, the
executable's path): each is refused, naming the variable, its value and the rule, or escaped so that the unit says
exactly that and systemd-analyze verify accepts it. No rendered unit holds a line its template does not write."""
import json
import os
import re
import shutil
import subprocess
import sys

import pytest

from tests.unit.conftest import COLLECTIONS

PLAYBOOK = """
- hosts: localhost
  connection: local
  gather_facts: false
  tasks:
    - name: Each case
      ansible.builtin.include_tasks: case.yml
      loop: "{{ cases }}"
      loop_control: {loop_var: case}
    - name: What each case gave
      ansible.builtin.copy:
        dest: "{{ out }}"
        content: "{{ outcomes | to_json }}"
        mode: "0600"
"""
CASE = """
- name: Render {{ case.id }}
  block:
    - name: The render entry point
      ansible.builtin.include_role:
        name: inferops.sglang.systemd_unit
        tasks_from: render
      vars:
        systemd_unit_name: "{{ case.name | default('sglang-30000') }}"
        systemd_unit_command: "{{ case.command }}"
        systemd_unit_working_directory: "{{ case.cwd | default('/') }}"
        systemd_unit_description: "{{ case.description | default('SGLang inference server') }}"
        systemd_unit_user: "{{ case.user | default('root') }}"
        systemd_unit_limits: "{{ case.limits | default({'LimitNOFILE': '1048576'}) }}"
        systemd_unit_readiness_gate: "{{ case.gate | default(true) }}"
        systemd_unit_liveness: "{{ case.liveness | default(true) }}"
        systemd_unit_watchdog_sec: "{{ case.watchdog | default(120) }}"
        systemd_unit_environment: "{{ case.environment | default({}) }}"
        systemd_unit_weight_cache: "{{ case.weights | default(false) }}"
        systemd_unit_python: "{{ case.python | default('') }}"
    - name: Rendered
      ansible.builtin.set_fact:
        outcomes: "{{ outcomes | default({}) | combine({case.id: {'unit': systemd_unit_rendered.unit,
                      'environment': systemd_unit_rendered.environment,
                      'weights': systemd_unit_rendered_weights}}) }}"
  rescue:
    - name: Refused
      ansible.builtin.set_fact:
        outcomes: "{{ outcomes | default({}) | combine({case.id: {'failed': ansible_failed_result.msg}}) }}"
"""
EVIL = "ExecStartPre=+/srv/evil.sh"


@pytest.fixture(scope="module")
def rendered(tmp_path_factory):
    """{case id: {'unit', 'environment'} or {'failed': msg}}, from one ansible-playbook run; with the executables the
    escaped cases name (copies of /bin/true) under the run's folder."""
    tmp = tmp_path_factory.mktemp("render")
    spaced = tmp / "my venv" / "bin" / "python"
    percent = tmp / "pc%d" / "bin" / "python"
    for exe in (spaced, percent):
        exe.parent.mkdir(parents=True)
        shutil.copy("/bin/true", str(exe))
    args = ["-m", "sglang.launch_server", "--model-path", "/models/m", "--port", "30000"]
    py = "/opt/sglang/venv/bin/python"
    cases = [
        dict(id="newline_cwd", command=[py] + args, cwd="/srv/w\n" + EVIL),
        dict(id="backslash_cwd", command=[py] + args, cwd="/srv/w\\"),
        dict(id="host", command=[py] + args + ["--host", "127.0.0.1\nExecStartPost=+/srv/evil.sh"]),
        dict(id="port", command=[py, "-m", "sglang.launch_server", "--port", "30000\nExecStartPost=+/srv/evil.sh"]),
        dict(id="dollar_exe", command=["/srv/$HOME/bin/python"] + args),
        dict(id="newline_exe", command=["/srv/bin/python\n" + EVIL] + args),
        dict(id="user", command=[py] + args, user="svc\nUser=root"),
        dict(id="limit", command=[py] + args, limits={"LimitNOFILE": "1\n" + EVIL}),
        dict(id="description", command=[py] + args, description="x\n" + EVIL),
        dict(id="spaced_exe", command=[str(spaced)] + args + ["--host", "::1"], cwd="/srv/my models/100%",
             description="SGLang on %H"),
        dict(id="percent_exe", command=[str(percent)] + args + ["--api-k", "sk-abbrev-1"]),
        dict(id="ipv6_wildcard", command=[py] + args + ["--host", "::"]),
        dict(id="ipv4_wildcard", command=[py] + args + ["--host", "0.0.0.0"]),
        dict(id="ipv6_bracketed", command=[py] + args + ["--host", "[::]"]),
        dict(id="tls", command=[py] + args + ["--ssl-certfile", "/etc/tls/c.pem", "--ssl-keyfile", "/etc/tls/k.pem",
                                              "--ssl-keyfile-password", "pem-pass-1"]),
        dict(id="watchdog_short", command=[py] + args, watchdog=35),
        dict(id="watchdog_short_probe", command=[py] + args, watchdog=35,
             environment={"SGLANG_HEALTH_CHECK_TIMEOUT": "5"}),
        dict(id="no_gate", command=[py] + args, gate=False),
        dict(id="no_liveness", command=[py] + args, liveness=False),
        dict(id="weights", command=[str(spaced)] + args + ["--tp", "2", "--dtype", "bfloat16", "--revision=r1",
                                                           "--trust-remote-code", "--mem-fraction-static", "0.8"],
             weights=True, user="sglang"),
        dict(id="weights_serve", command=["/opt/sglang/venv/bin/sglang", "serve", "--model-path", "/models/m"],
             weights=True, python="/opt/sglang/venv/bin/python3.12"),
        dict(id="weights_serve_no_python", command=["/opt/sglang/venv/bin/sglang", "serve", "--model-path", "/m"],
             weights=True),
        dict(id="weights_speculative", command=[py] + args + ["--speculative-algorithm", "EAGLE"], weights=True),
        dict(id="weights_awq", command=[py] + args + ["--quantization", "awq"], weights=True),
        dict(id="weights_expandable", command=[py] + args, weights=True,
             environment={"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}),
        dict(id="weights_no_gate", command=[py] + args, weights=True, gate=False),
    ]
    (tmp / "play.yml").write_text(PLAYBOOK)
    (tmp / "case.yml").write_text(CASE)
    out = tmp / "out.json"
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=COLLECTIONS, ANSIBLE_LOCALHOST_WARNING="false",
               ANSIBLE_INVENTORY_UNPARSED_WARNING="false", ANSIBLE_NOCOLOR="1")
    extra = json.dumps({"cases": cases, "out": str(out)})
    p = subprocess.run([os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), str(tmp / "play.yml"),
                        "-e", extra], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       universal_newlines=True, check=False, cwd=str(tmp), timeout=300)
    assert p.returncode == 0, p.stdout[-4000:]
    result = json.loads(out.read_text())
    result["_tmp"] = str(tmp)
    return result


def injected(unit):
    """The unit's lines that start an Exec*= other than its own ExecStart=, ExecStartPost= and the sweep's ExecStartPre=, or that are no
    Key=value, section or comment: what a value with a newline would have added."""
    bad = []
    for line in unit.splitlines():
        if not line or line.startswith(("#", "[")):
            continue
        key = line.split("=", 1)[0]
        sweep = key == "ExecStartPre" and line.endswith(" -I /usr/local/bin/inferops-sglang-sweep-shm")
        if "=" not in line or not re.match(r"[A-Z][A-Za-z]+\Z", key) or key.startswith("Exec") and key not in (
                "ExecStart", "ExecStartPost") and not sweep or "evil" in line:
            bad.append(line)
    return bad


@pytest.mark.parametrize("case, variable", [
    ("newline_cwd", "systemd_unit_working_directory '/srv/w\\nExecStartPre=+/srv/evil.sh': holds a control character"),
    ("backslash_cwd", "systemd_unit_working_directory '/srv/w\\\\': holds a backslash"),
    ("host", "the command's --host '127.0.0.1\\nExecStartPost=+/srv/evil.sh': the readiness gate asks it"),
    ("port", "the command's --port '30000\\nExecStartPost=+/srv/evil.sh': the readiness gate asks it"),
    ("dollar_exe", "systemd_unit_command[0] '/srv/$HOME/bin/python': an absolute path without control characters"),
    ("newline_exe", "systemd_unit_command[0] '/srv/bin/python\\nExecStartPre=+/srv/evil.sh'"),
    ("user", "systemd_unit_user 'svc\\nUser=root': a string without control characters"),
    ("limit", "systemd_unit_limits {'LimitNOFILE': '1\\nExecStartPre=+/srv/evil.sh'}: a number, infinity"),
    ("description", "systemd_unit_description 'x\\nExecStartPre=+/srv/evil.sh': a string without control"),
    ("watchdog_short", "systemd_unit_watchdog_sec 35: more than liveness_interval_sec (10) plus a probe's longest wait "
                       "(30 s: SGLANG_HEALTH_CHECK_TIMEOUT plus 10)"),
])
def test_a_value_that_would_add_a_line_is_refused_naming_the_rule_and_the_value(rendered, case, variable):
    got = rendered[case]
    assert "failed" in got, "rendered: %s" % got.get("unit")
    assert got["failed"].startswith("systemd_unit: bad input, nothing was written: ") and variable in got["failed"], \
        got["failed"]


def verify(tmp, name, unit):
    folder = os.path.join(tmp, "verify-" + name)
    os.mkdir(folder)
    path = os.path.join(folder, name + ".service")
    with open(path, "w") as f:
        f.write(unit)
    p = subprocess.run(["systemd-analyze", "verify", path], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       universal_newlines=True, check=False)
    return p.returncode, p.stdout


def test_a_space_and_a_percent_in_paths_are_escaped_and_systemd_reads_them_back(rendered):
    unit = rendered["spaced_exe"]["unit"]
    exe = os.path.join(rendered["_tmp"], "my venv", "bin", "python")
    lines = unit.splitlines()
    assert 'ExecStart="%s" "-m" "sglang.launch_server"' % exe in unit
    assert 'ExecStartPost="%s" /usr/local/bin/inferops-sglang-ready ::1 30000' % exe in lines
    # the shared-memory sweep runs on the same interpreter, with -I (nothing of the user's environment or paths)
    assert 'ExecStartPre=-"%s" -I /usr/local/bin/inferops-sglang-sweep-shm' % exe in lines
    assert "WorkingDirectory=/srv/my models/100%%" in lines and "Description=SGLang on %%H" in lines
    assert injected(unit) == []
    rc, said = verify(rendered["_tmp"], "spaced", unit)
    assert rc == 0, said


@pytest.mark.parametrize("case, asked", [("ipv6_wildcard", "::1"), ("ipv6_bracketed", "::1"),
                                         ("ipv4_wildcard", "127.0.0.1")])
def test_the_gate_asks_a_wildcard_bind_on_loopback_of_its_own_family(rendered, case, asked):
    """`--host ::` is IPv6 only (SGLang's uvicorn binds it so; seen on a real 0.5.15: 127.0.0.1 refused, [::1]
    answers): the gate asks ::1, not 127.0.0.1 - there it would wait out TimeoutStartSec."""
    lines = rendered[case]["unit"].splitlines()
    assert "ExecStartPost=/opt/sglang/venv/bin/python /usr/local/bin/inferops-sglang-ready %s 30000" % asked in lines


def test_liveness_a_checker_feeds_the_units_watchdog_once_the_gate_passed(rendered):
    """By default: after the gate, a second ExecStartPost leaves the checker in the unit (isolated: -I), the watchdog
    counts from the end of the start-up, and the checker, not the main process, may feed it; systemd accepts it."""
    unit = rendered["ipv4_wildcard"]["unit"]
    lines = unit.splitlines()
    gate = lines.index("ExecStartPost=/opt/sglang/venv/bin/python /usr/local/bin/inferops-sglang-ready 127.0.0.1 30000")
    assert lines[gate + 2:gate + 5] == [
        "ExecStartPost=/opt/sglang/venv/bin/python -I /usr/local/bin/inferops-sglang-ready --live 127.0.0.1 30000 10",
        "WatchdogSec=120", "NotifyAccess=all"]
    spaced = rendered["spaced_exe"]["unit"]  # an executable that exists, for systemd-analyze
    assert "--live ::1 30000 10" in spaced and "WatchdogSec=120" in spaced.splitlines()
    rc, said = verify(rendered["_tmp"], "liveness", spaced)
    assert rc == 0, said


@pytest.mark.parametrize("case", ["no_gate", "no_liveness"])
def test_no_liveness_without_the_gate_or_when_off(rendered, case):
    """Without the gate the start-up completes at once, so the watchdog would count the load: no liveness then."""
    unit = rendered[case]["unit"]
    assert "--live" not in unit and "WatchdogSec" not in unit and "NotifyAccess" not in unit


def test_a_shorter_health_check_timeout_allows_a_shorter_watchdog(rendered):
    assert "WatchdogSec=35" in rendered["watchdog_short_probe"]["unit"].splitlines()


def test_a_percent_in_the_executable_is_no_specifier(rendered):
    """Unescaped, %d would be the credentials folder (systemd expands specifiers in the executable too)."""
    unit = rendered["percent_exe"]["unit"]
    exe = os.path.join(rendered["_tmp"], "pc%d", "bin", "python")
    assert 'ExecStart="%s" "-m"' % exe.replace("%", "%%") in unit and injected(unit) == []
    rc, said = verify(rendered["_tmp"], "percent", unit)
    assert rc == 0, said
    rc, said = verify(rendered["_tmp"], "percent-unescaped", unit.replace("%%d", "%d"))
    assert rc != 0 and "/run/credentials/" in said, "the check above can fail: unescaped, systemd expands %d"


def test_an_abbreviated_secret_flag_moves_to_the_environment_file(rendered):
    """argparse takes --api-k for --api-key: its value goes to the 0600 environment file, never into the 0644 unit."""
    got = rendered["percent_exe"]
    assert "sk-abbrev-1" not in got["unit"] and '"--api-k" ${INFEROPS_API_KEY}' in got["unit"]
    assert 'INFEROPS_API_KEY="sk-abbrev-1"' in got["environment"].splitlines()


def test_the_tls_keys_password_moves_to_the_environment_file_and_its_path_stays(rendered):
    """--ssl-keyfile-password is a secret of SGLang's (security.md, secret flags): never in the 0644 unit's
    ExecStart, whatever systemd_unit_secret_flags says; --ssl-keyfile, a path, stays where it is."""
    got = rendered["tls"]
    assert "pem-pass-1" not in got["unit"], got["unit"]
    assert '"--ssl-keyfile-password" ${INFEROPS_SSL_KEYFILE_PASSWORD}' in got["unit"]
    assert '"--ssl-keyfile" "/etc/tls/k.pem"' in got["unit"]
    assert 'INFEROPS_SSL_KEYFILE_PASSWORD="pem-pass-1"' in got["environment"].splitlines()


def test_the_weight_cache_daemon_runs_in_a_unit_the_servers_requires_and_systemd_accepts_both(rendered):
    """systemd_unit_weight_cache: the daemon's unit runs SGLang's daemon with the server's model options, as its user,
    in a private /tmp it shares with the server's unit; the server runs as its client, requires it and starts after
    it. systemd-analyze accepts the two side by side."""
    got = rendered["weights"]
    exe = os.path.join(rendered["_tmp"], "my venv", "bin", "python")
    daemon = got["weights"]["unit"]
    assert got["weights"]["name"] == "sglang-30000-weights"
    lines = daemon.splitlines()
    assert ('ExecStart="%s" "-m" "sglang.srt.weight_cache.daemon" "--model-path" "/models/m" "--tp-size" "2" '
            '"--dtype" "bfloat16" "--revision" "r1" "--trust-remote-code"' % exe) in lines
    assert 'ExecStartPre="%s" -I /usr/local/bin/inferops-sglang-ready --clean' % exe in lines
    assert 'ExecStartPost="%s" -I /usr/local/bin/inferops-sglang-ready --weights 2' % exe in lines
    assert "User=sglang" in lines and "PrivateTmp=yes" in lines and "[Install]" not in lines
    assert "EnvironmentFile=/etc/inferops/sglang/sglang-30000.env" in lines
    server = got["unit"].splitlines()
    assert ["Requires=sglang-30000-weights.service", "After=sglang-30000-weights.service",
            "JoinsNamespaceOf=sglang-30000-weights.service"] == [
        x for x in server if x.split("=")[0] in ("Requires", "JoinsNamespaceOf") or x.startswith("After=sglang")]
    assert "PrivateTmp=yes" in server
    assert '"--weight-cache-mode" "client"' in [x for x in server if x.startswith("ExecStart=")][0]
    folder = os.path.join(rendered["_tmp"], "verify-weights")
    os.mkdir(folder)
    for name, text in (("sglang-30000-weights", daemon), ("sglang-30000", got["unit"])):
        with open(os.path.join(folder, name + ".service"), "w") as f:
            f.write(text)
    p = subprocess.run(["systemd-analyze", "verify", os.path.join(folder, "sglang-30000.service"),
                        os.path.join(folder, "sglang-30000-weights.service")], stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, universal_newlines=True, check=False)
    assert p.returncode == 0, p.stdout


def test_a_console_scripts_daemon_runs_on_the_python_its_host_named(rendered):
    lines = rendered["weights_serve"]["weights"]["unit"].splitlines()
    assert ('ExecStart=/opt/sglang/venv/bin/python3.12 "-m" "sglang.srt.weight_cache.daemon" "--model-path" '
            '"/models/m"') in lines


def test_without_the_weight_cache_the_server_has_no_daemon(rendered):
    got = rendered["ipv4_wildcard"]
    assert got["weights"] is None
    assert "Requires=" not in got["unit"] and "PrivateTmp" not in got["unit"] and "weight-cache" not in got["unit"]


@pytest.mark.parametrize("case, said", [
    ("weights_speculative", "--speculative-algorithm EAGLE: SGLang refuses speculative decoding with a weight cache"),
    ("weights_awq", "--quantization awq: SGLang's weight cache shares only unquantized and block-wise FP8 weights"),
    ("weights_expandable", "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True: SGLang's weight cache daemon refuses"),
    ("weights_no_gate", "the weight cache needs the readiness gate (systemd_unit_readiness_gate: true)"),
    ("weights_serve_no_python", "the Python that /opt/sglang/venv/bin/sglang runs on is not known"),
])
def test_a_server_the_weight_cache_cannot_serve_is_refused_naming_the_rule_and_the_value(rendered, case, said):
    got = rendered[case]
    assert "failed" in got, got
    assert got["failed"].startswith("systemd_unit: systemd_unit_weight_cache is true, and SGLang's weight cache "
                                    "cannot serve this server, nothing was written: ") and said in got["failed"], \
        got["failed"]
