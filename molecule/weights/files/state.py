"""The two units of a server with a weight cache, as systemd and the host see them, as JSON: each unit's state,
main pid, restarts and start time; the daemon's files in the units' private /tmp (with the pid each ready file
names, and whether it lives); what the server's journal says of the cache; /health's status and the model served.
`state.py wait-both N`: first waits (up to N s) until both units are active and /health answers 200."""
import glob
import json
import os
import subprocess
import sys
import time
import urllib.request

SERVER, DAEMON = "sglang-30000.service", "sglang-30000-weights.service"
PROPS = ("ActiveState", "SubState", "MainPID", "NRestarts", "ActiveEnterTimestampMonotonic", "Result", "ExecStart")


def show(unit):
    out = subprocess.run(["systemctl", "show", unit, "-p", ",".join(PROPS)], stdout=subprocess.PIPE,
                         universal_newlines=True, check=False).stdout
    return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)


def health():
    try:
        with urllib.request.urlopen("http://127.0.0.1:30000/health", timeout=5) as r:
            return r.status
    except Exception as e:  # pylint: disable=broad-except
        return getattr(e, "code", 0)


def model():
    try:
        with urllib.request.urlopen("http://127.0.0.1:30000/v1/models", timeout=5) as r:
            return json.load(r)["data"][0]["id"]
    except Exception:  # pylint: disable=broad-except
        return None


def files():
    out = []
    for path in sorted(glob.glob("/tmp/systemd-private-*-%s-*/tmp/sglang_weight_cache_*" % DAEMON)) + sorted(
            glob.glob("/tmp/sglang_weight_cache_*")):
        row = {"path": path}
        if path.endswith(".ready"):
            with open(path) as f:
                pid = [int(x[4:]) for x in f.read().splitlines() if x.startswith("pid=") and x[4:].isdigit()]
            row.update(pid=pid[0] if pid else None, alive=bool(pid) and os.path.exists("/proc/%d" % pid[0]))
        out.append(row)
    return out


def journal(unit):
    return subprocess.run(["journalctl", "-u", unit, "--no-pager", "-o", "cat"], stdout=subprocess.PIPE,
                          universal_newlines=True, check=False).stdout


def state():
    text = journal(SERVER)
    return {"server": show(SERVER), "daemon": show(DAEMON), "files": files(), "health": health(), "model": model(),
            "mapped": text.count("Zero-copy: mapped"), "mismatch": text.count("Daemon config mismatch"),
            "refused": text.count("refused the connection"), "kv_failed": text.count("Not enough memory"),
            "daemons": int(subprocess.run("pgrep -c -f '[s]glang.srt.weight_cache.daemon'", shell=True,
                                          stdout=subprocess.PIPE, universal_newlines=True, check=False).stdout.strip() or 0)}


if __name__ == "__main__":
    if sys.argv[1:2] == ["wait-both"]:
        deadline = time.time() + float(sys.argv[2])
        while time.time() < deadline:
            s = state()
            if s["server"].get("ActiveState") == "active" and s["daemon"].get("ActiveState") == "active" \
                    and s["health"] == 200:
                break
            time.sleep(1)
    print(json.dumps(state(), sort_keys=True))
