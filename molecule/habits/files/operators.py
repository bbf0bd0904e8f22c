"""Operators' habits against one host, from the controller: each prints a JSON summary for converge.yml to assert.

  look HOST_ARGS              --check --diff first: what it shows, and that nothing on the host changed
  bad_flag HOST_ARGS FLAG...  a cutover per flag SGLang refuses, with a prober on the port throughout
  together HOST_ARGS PORT...  one cutover per port (a port twice: two runs of it), all started at once

HOST_ARGS: INVENTORY PLAYBOOK HOST ADDRESS SSH_KEY
"""
import json
import os
import re
import subprocess
import sys
import time

what, inventory, playbook, host, address, key = sys.argv[1:7]
args = sys.argv[7:]
ssh = ["ssh", "-n", "-q", "-i", key, "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null", "root@" + address]
STATE = "/var/lib/inferops/cutover"
WATCHED = "/etc/systemd/system /etc/inferops /usr/local/bin /var/lib/inferops /opt/sglang/venv/bin"
PROBER = ("python3 -c \"import os, socket, time\nok = refused = 0\nwhile not os.path.exists('/root/stop-prober'):\n"
          "    try:\n        socket.create_connection(('127.0.0.1', %d), timeout=2).close(); ok += 1\n"
          "    except OSError:\n        refused += 1\n    time.sleep(0.01)\nprint(ok, refused)\"")


def on_host(cmd):
    return subprocess.run(ssh + [cmd], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                          universal_newlines=True, check=False).stdout


def listener(port):
    return on_host("ss -Htlnp 'sport = :%d' | grep -o 'pid=[0-9]*' | head -1 | cut -d= -f2" % port).strip()


def playbook_cmd(*extra):
    return ["ansible-playbook", "-i", inventory, playbook, "--limit", host] + list(extra)


def summary(p, out):
    recap = re.search(r"^%s\s+:.*changed=(\d+)" % re.escape(host), out, re.M)
    return {"rc": p.returncode, "changed": int(recap.group(1)) if recap else None}


def kept(name, text):
    """The output of a playbook run, kept where INFEROPS_HABITS_LOGS says (for a failure's reader)."""
    folder = os.environ.get("INFEROPS_HABITS_LOGS")
    if folder:
        os.makedirs(folder, exist_ok=True)
        with open(os.path.join(folder, "%s-%s-%d.log" % (host, name, time.time() * 1000)), "w") as f:
            f.write(text)
    return re.sub(r"\x1b\[[0-9;]*m", "", text)  # molecule forces colours


def failed(p, out, size=2000):
    """What a failed run said: its failed tasks' lines, else its end; "" when it passed."""
    if p.returncode == 0:
        return ""
    lines = [line for line in out.splitlines() if line.startswith(("fatal:", "failed:", "[ERROR]"))]
    return ("\n".join(lines) or out)[-size:]


def checksums():
    return on_host("find %s -type f -print0 2>/dev/null | sort -z | xargs -0 -r sha256sum" % WATCHED)


if what == "look":
    before, pid = checksums(), listener(30000)
    p = subprocess.run(playbook_cmd("--check", "--diff"), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, universal_newlines=True, check=False)
    o = kept("look", p.stdout)
    preflight = o[o.find("TASK [inferops.sglang.cutover : Preflight - nothing is stopped unless every check passes]"):]
    preflight = preflight[:preflight.find("\nTASK [", 1)]  # that task's output alone
    res = summary(p, o)
    after = checksums()
    res.update(unchanged=after == before and bool(before),
               changed_files=sorted(set(after.splitlines()) ^ set(before.splitlines())), same_pid=listener(30000) == pid and bool(pid),
               preflight_changed="\nchanged: [%s]" % host in preflight,
               shows_unit="ExecStart=/opt/sglang/venv/bin/python" in preflight and "[Service]" in preflight,
               shows_environment_masked="SGLANG_DOUBLE_DEVICES=********" in preflight and "/dev/nvidia*" not in
               re.sub(r"ExecStart=.*", "", preflight),
               shows_gate="inferops-sglang-ready" in preflight, tail=failed(p, o, 1500))
elif what == "bad_flag":
    pid = listener(30000)
    on_host("rm -f /root/stop-prober")
    prober = subprocess.Popen(ssh + [PROBER % 30000], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                              universal_newlines=True)
    time.sleep(1)
    runs = []
    for flag in args:
        p = subprocess.run(playbook_cmd("-e", json.dumps({"cutover_extra_args": [flag]})), stdin=subprocess.DEVNULL,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True, check=False)
        said, o = "unrecognized arguments: %s" % flag, kept("bad-flag", p.stdout)
        runs.append(dict(summary(p, o), flag=flag, named=said in o,
                         untouched="nothing was touched" in o or "nothing was stopped" in o,
                         tail="" if said in o else o[-1500:]))
    on_host("touch /root/stop-prober")
    ok, refused = [int(x) for x in prober.communicate(timeout=30)[0].split()]
    res = dict(runs=runs, probes=ok, refused=refused, same_pid=listener(30000) == pid and bool(pid),
               unit_absent=on_host("test -e /etc/systemd/system/sglang-30000.service && echo present").strip() == "")
elif what == "together":
    ports = [int(x) for x in args]
    before = dict((port, on_host("ls %s/%d/history 2>/dev/null | grep -- '-cutover.json$' || true" % (STATE, port)).split()) for port in set(ports))
    go = time.time() + 2
    runs = [subprocess.Popen([sys.executable, "-c", "import os, sys, time\nwhile time.time() < %r: pass\nos.execvp(sys.argv[1], sys.argv[1:])" % go]
                             + playbook_cmd("-e", json.dumps({"cutover_port": port})), stdin=subprocess.DEVNULL,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True) for port in ports]
    outs = [kept("together-%d" % port, r.communicate(timeout=600)[0]) for r, port in zip(runs, ports)]
    res = {"runs": [dict(summary(r, o), port=port, tail=failed(r, o))
                    for r, o, port in zip(runs, outs, ports)], "ports": {}}
    for port in set(ports):
        outcome = json.loads(on_host("cat %s/%d/switch.json" % (STATE, port)) or "{}")
        after = on_host("ls %s/%d/history | grep -- '-cutover.json$' || true" % (STATE, port)).split()
        res["ports"][str(port)] = dict(
            new_records=len(set(after) - set(before[port])), error=outcome.get("error"),
            plans=len(on_host("ls %s/%d | grep '^switch-plan-' || true" % (STATE, port)).split()),
            recorded=bool(outcome.get("recorded")),
            serving=on_host("systemctl is-active sglang-%d" % port).strip(),
            listener_in_unit="sglang-%d.service" % port in on_host("cat /proc/%s/cgroup" % listener(port)))
print(json.dumps(res))
