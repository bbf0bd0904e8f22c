"""F7: run playbooks/cutover.yml on one host, SIGKILL ansible-playbook (its whole process group) as soon as the
switch has begun on the host, wait until the host serves, run the playbook again. Prints a JSON summary.

argv: INVENTORY PLAYBOOK HOST ADDRESS SSH_KEY
"""
import json
import os
import re
import signal
import subprocess
import sys
import time

inventory, playbook, host, address, key = sys.argv[1:6]
ssh = ["ssh", "-q", "-i", key, "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null", "root@" + address]
STATE = "/var/lib/inferops/cutover/30000/switch.json"
HEALTH = ("python3 -c \"import urllib.request as u; print(u.urlopen('http://127.0.0.1:30000/health', timeout=30)"
          ".status)\"")


def on_host(cmd):
    return subprocess.run(ssh + [cmd], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, universal_newlines=True,
                          check=False)


out = {"killed_while_switching": False}
run = subprocess.Popen(["ansible-playbook", "-i", inventory, playbook, "--limit", host], stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, universal_newlines=True, start_new_session=True)
for line in run.stdout:
    if "TASK [inferops.sglang.cutover : Switch - stop the family" in line:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and on_host("test -s %s" % STATE).returncode != 0:
            time.sleep(0.05)
        steps = on_host("cat %s" % STATE).stdout
        os.killpg(run.pid, signal.SIGKILL)
        out["killed_while_switching"] = '"finished": false' in steps
        out["state_when_killed"] = steps[-400:]
        break
run.wait()
out["first_rc"] = run.returncode
deadline = time.monotonic() + 120
serving = ""
while time.monotonic() < deadline:
    serving = on_host(HEALTH).stdout.strip()
    if serving == "200":
        break
    time.sleep(0.5)
out["serving_after"] = serving
again = subprocess.run(["ansible-playbook", "-i", inventory, playbook, "--limit", host], stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, universal_newlines=True, check=False)
recap = re.search(r"^%s\s+:.*changed=(\d+)" % re.escape(host), again.stdout, re.M)
out.update(rerun_rc=again.returncode, rerun_changed=int(recap.group(1)) if recap else None,
           rerun_tail=again.stdout[-1500:] if again.returncode else "")
print(json.dumps(out))
