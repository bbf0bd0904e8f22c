"""F7, F12: run playbooks/cutover.yml on one host, send SIGNAL to ansible-playbook (its whole process group, as a
terminal's Ctrl-C or a kill does) as soon as a switch has begun on the host, wait until the host serves, run the
playbook again, then once more. Prints a JSON summary: whether the switch went on, the reruns' changes, and the
records the host kept (the last one compared with the switch's outcome).

argv: INVENTORY PLAYBOOK HOST ADDRESS SSH_KEY [SIGNAL (KILL, INT)] [EXTRA_VARS (JSON)]
"""
import json
import os
import re
import signal
import subprocess
import sys
import time

inventory, playbook, host, address, key = sys.argv[1:6]
sig = getattr(signal, "SIG" + (sys.argv[6] if len(sys.argv) > 6 else "KILL"))
extra = ["-e", sys.argv[7]] if len(sys.argv) > 7 else []
ssh = ["ssh", "-q", "-i", key, "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null", "root@" + address]
STATE = "/var/lib/inferops/cutover/30000"
HEALTH = ("python3 -c \"import urllib.request as u; print(u.urlopen('http://127.0.0.1:30000/health', timeout=30)"
          ".status)\"")
# on the host, in one call: the outcome file of a switch that has begun and not finished (the previous one's,
# finished, does not count), printed as soon as it appears; the playbook's stages before the switch may take
# minutes on a busy controller
BEGUN = ("python3 -c \"import json, time\nend = time.time() + 540\nwhile time.time() < end:\n    try:\n"
         "        o = json.load(open('%s/switch.json'))\n    except Exception:\n        o = {}\n"
         "    if o and not o.get('finished'):\n        print(json.dumps(o)); break\n    time.sleep(0.01)\"" % STATE)


def on_host(cmd):
    return subprocess.run(ssh + [cmd], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                          universal_newlines=True, check=False)


def playbook_run():
    again = subprocess.run(["ansible-playbook", "-i", inventory, playbook, "--limit", host] + extra,
                           stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           universal_newlines=True, check=False)
    text = re.sub(r"\x1b\[[0-9;]*m", "", again.stdout)  # molecule may force colours
    recap = re.search(r"^%s\s+:.*changed=(\d+)" % re.escape(host), text, re.M)
    changed = int(recap.group(1)) if recap else None
    # a failed or changing run keeps what says why: its tail, and each task that reported changed with its plan line
    task = r"^TASK \[[^\n]*\]\s*\**\n(?:(?!TASK \[)[^\n]*\n){0,4}?changed: [^\n]*(?:\n[^\n]+){0,12}"
    why = [m.group(0)[:600] for m in re.finditer(task, text, re.M)]
    return again.returncode, changed, (text[-1500:] + "\n".join(why)) if again.returncode or changed else ""


def records():
    return sorted(on_host("ls %s/history 2>/dev/null | grep -- '-cutover.json$' || true" % STATE).stdout.split())


out = {"killed_while_switching": False, "records_before": records()}
watch = subprocess.Popen(ssh + [BEGUN], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, universal_newlines=True)
run = subprocess.Popen(["ansible-playbook", "-i", inventory, playbook, "--limit", host] + extra, stdin=subprocess.DEVNULL,
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True, start_new_session=True)
begun = watch.communicate(timeout=600)[0]
out["killed_while_switching"] = bool(begun.strip())
os.killpg(run.pid, sig)
out["state_when_killed"] = begun[-400:]
run.communicate()
out["first_rc"] = run.returncode
deadline = time.monotonic() + 120
serving = ""
while time.monotonic() < deadline:
    serving = on_host(HEALTH).stdout.strip()
    if serving == "200":
        break
    time.sleep(0.5)
out["serving_after"] = serving
out["rerun_rc"], out["rerun_changed"], out["rerun_tail"] = playbook_run()
out["third_rc"], out["third_changed"], out["third_tail"] = playbook_run()
outcome = json.loads(on_host("cat %s/switch.json" % STATE).stdout or "{}")
last = json.loads(on_host("cat %s/last.json" % STATE).stdout or "{}")
out.update(records_after=records(), switch_id=outcome.get("id"), recorded=outcome.get("recorded"),
           begun_id=(json.loads(begun) if begun.strip() else {}).get("id"),
           record_matches=bool(last) and last.get("steps") == outcome.get("steps") and last.get("time") == outcome.get("began")
           and last.get("downtime_switch_sec") == outcome.get("downtime"))
print(json.dumps(out))
