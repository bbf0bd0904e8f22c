"""Stop the unit's first scheduler (SIGSTOP: alive, answering nothing), then time systemd's restart of the unit and
its return to active; prints {restart_after, active_after, stopped} (seconds from the stop; the scheduler's pid)."""
import json
import os
import signal
import subprocess
import sys
import time

UNIT = "sglang-30000.service"


def show(prop):
    return subprocess.run(["systemctl", "show", "-p", prop, "--value", UNIT], stdout=subprocess.PIPE,
                          universal_newlines=True, check=True).stdout.strip()


def until(check, limit, what):
    while not check():
        if time.monotonic() - t0 > limit:
            sys.exit("%s %d s after the stop" % (what, limit))
        time.sleep(0.5)
    return round(time.monotonic() - t0, 1)


main = int(show("MainPID"))
scheduler = int(subprocess.run(["pgrep", "-P", str(main), "-f", "^sglang::scheduler_TP0"], stdout=subprocess.PIPE,
                               universal_newlines=True, check=True).stdout.split()[0])
t0 = time.monotonic()
os.kill(scheduler, signal.SIGSTOP)
restart_after = until(lambda: show("NRestarts") == "1", 170, "no restart")
active_after = until(lambda: show("ActiveState") == "active", 240, "not active again")
print(json.dumps({"restart_after": restart_after, "active_after": active_after, "stopped": scheduler}))
