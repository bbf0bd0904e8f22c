"""The heal suite's readings (heal.sh), standard library only; the same code reads the SGLang double on a CPU.

  heal.py flood --port P --cap N --target S --budget S --out FILE [--prompts K] [--text]
      A server kept busy: /health_generate asked back to back while prompts of growing length go in, one at a time
      (each its own forward: the server's chunk is as long as its token cap), until one takes --target seconds or
      --budget is spent; then K of that length at once. Writes what each prompt took, every probe, the longest time
      without a 200, and the schedulers' CPU time meanwhile. --text: prompts as words (the double counts words).
  heal.py watch UNIT FILE
      `systemctl show` of the unit every 0.2 s, a JSON line at each change (until killed).
  heal.py schedulers UNIT
      The pids of the unit's sglang::scheduler processes (below its main process), one a line.
  heal.py shm VERSION [UID]
      /dev/shm: the segments the version names (the unit's sweep's own look()), and the names it does not.
  heal.py caches ENVFILE
      The cache variables of a unit's environment file, each with its folder's size (lstat, no link followed).
  heal.py sizes DIR...
      Each folder's bytes and files (lstat, no link followed); null for one that is not there.
  heal.py restarts FILE SINCE
      From a watch file: when the unit left active after SINCE (epoch), its result, when it was active again.
Times are epoch seconds (time.time()), so that the shell's $EPOCHREALTIME marks compare with them.
"""
import argparse
import json
import os
import random
import re
import stat
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
import importlib.util
from importlib.machinery import SourceFileLoader

HERE = os.path.dirname(os.path.abspath(__file__))
SWEEP = os.path.join(HERE, "..", "..", "..", "roles", "systemd_unit", "files", "inferops-sglang-sweep-shm")
SCHEDULER = "sglang::scheduler"
CACHE_VARS = ("SGLANG_CACHE_DIR", "TRITON_CACHE_DIR", "TORCHINDUCTOR_CACHE_DIR", "FLASHINFER_WORKSPACE_BASE",
              "TVM_FFI_CACHE_DIR", "SGLANG_DG_CACHE_DIR", "CUDA_CACHE_PATH")


def http(url, body=None, timeout=30.0):
    """(status, seconds): 0 refused or no answer in time."""
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"} if data else {})
    t = time.time()
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            r.read()
            status = r.status
    except urllib.error.HTTPError as e:
        status = e.code
    except OSError:
        status = 0
    return status, round(time.time() - t, 3)


# --- the busy server ---------------------------------------------------------------------------
class Prober(threading.Thread):
    """GET /health_generate back to back: [(start, end, status)]."""

    def __init__(self, port, timeout):
        super().__init__(daemon=True)
        self.url, self.timeout = "http://127.0.0.1:%d/health_generate" % port, timeout
        self.probes, self.stopped = [], threading.Event()

    def run(self):
        while not self.stopped.is_set():
            t = time.time()
            status, took = http(self.url, timeout=self.timeout)
            self.probes.append((round(t, 3), round(t + took, 3), status))
            if status != 200 and took < 0.2:
                time.sleep(0.2)  # refused at once: not a busy server's wait


def probe_summary(probes):
    """Counts, and the longest stretch without a 200: from the end of a 200 (or the first probe) to the end of the next
    200 (or the last probe), over the stretches that hold a failed probe."""
    out = {"count": len(probes), "ok": 0, "503": 0, "other": 0, "failing_s": 0.0, "longest_without_200_s": 0.0,
           "longest_from": None}
    last_ok = probes[0][0] if probes else None
    bad = False
    for start, end, status in probes:
        if status == 200:
            out["ok"] += 1
            if bad and end - last_ok > out["longest_without_200_s"]:
                out["longest_without_200_s"], out["longest_from"] = round(end - last_ok, 3), last_ok
            last_ok, bad = end, False
            continue
        out["503" if status == 503 else "other"] += 1
        out["failing_s"] += end - start
        bad = True
    if bad and probes and probes[-1][1] - last_ok > out["longest_without_200_s"]:
        out["longest_without_200_s"], out["longest_from"] = round(probes[-1][1] - last_ok, 3), last_ok
    out["failing_s"] = round(out["failing_s"], 3)
    return out


def scheduler_cpu():
    """{pid: CPU seconds} of every sglang::scheduler process seen in /proc."""
    out = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open("/proc/%s/cmdline" % d, "rb") as f:
                if not f.read().startswith(SCHEDULER.encode()):
                    continue
            with open("/proc/%s/stat" % d) as f:
                fields = f.read().rsplit(")", 1)[1].split()
            out[int(d)] = (int(fields[11]) + int(fields[12])) / float(os.sysconf("SC_CLK_TCK"))
        except (OSError, IndexError, ValueError):
            continue
    return out


def prompt(tokens, text, rng):
    """A request of so many prompt tokens, its head random so that no two share a prefix (the radix cache would
    reuse it); one new token."""
    params = {"max_new_tokens": 1, "temperature": 0.0}
    if text:
        return {"text": " ".join(["w%d" % rng.randrange(10 ** 9)] + ["w"] * (tokens - 1)), "sampling_params": params}
    head = [rng.randrange(3, 1024) for dummy in range(8)]
    return {"input_ids": head + [3 + i % 1000 for i in range(tokens - len(head))], "sampling_params": params}


def flood(a):
    rng = random.Random()
    url = "http://127.0.0.1:%d/generate" % a.port
    began = time.time()
    deadline = began + a.budget
    prober = Prober(a.port, a.hct + 15)
    cpu0 = scheduler_cpu()
    prober.start()
    levels, tokens, result = [], min(a.start, a.cap), {}
    while True:
        status, took = http(url, prompt(tokens, a.text, rng), timeout=max(5.0, deadline - time.time() + 60))
        levels.append({"tokens": tokens, "status": status, "seconds": took})
        if status != 200 or took >= a.target or tokens >= a.cap:
            break
        # one forward's attention grows with the square of the prompt (the fixed costs make a short one look slower:
        # the next may fall short, never far over); at most 4 times longer, and only what the budget leaves time for
        grow = min(4.0, max(1.5, (a.target * 1.15 / max(took, 0.05)) ** 0.5))
        nxt = min(a.cap, int(tokens * grow))
        left = deadline - time.time()
        if took * (nxt / float(tokens)) ** 2 > left:
            nxt = int(tokens * max(1.0, (left / max(took, 0.05)) ** 0.5))
        if nxt <= tokens:
            break
        tokens = nxt
    last = levels[-1]
    flood_done = []
    if last["status"] == 200 and a.prompts > 0:
        k = min(a.prompts, int(max(0.0, deadline - time.time()) // max(last["seconds"], 0.05)))
        threads = []
        for dummy in range(k):
            body = prompt(last["tokens"], a.text, rng)
            th = threading.Thread(target=lambda b=body: flood_done.append(http(url, b, timeout=a.budget + 120)))
            th.start()
            threads.append(th)
        for th in threads:
            th.join()
        result["flood"] = {"prompts": k, "tokens": last["tokens"], "answers": [{"status": s, "seconds": t}
                                                                               for s, t in flood_done]}
    ended = time.time()
    time.sleep(a.hct + 1.5)  # the probes of the busy time answered; one after it, once idle again
    prober.stopped.set()
    prober.join(a.hct + 20)
    cpu1 = scheduler_cpu()
    busy = round(ended - began, 3)
    cpu = {str(p): round(cpu1[p] - cpu0.get(p, 0.0), 2) for p in cpu1}
    result.update(began=round(began, 3), ended=round(ended, 3), busy_s=busy, target_s=a.target, cap=a.cap,
                  levels=levels, probes=probe_summary(prober.probes), probe_log=prober.probes,
                  scheduler_cpu_s=cpu, scheduler_cpu_share=round(max(cpu.values() or [0.0]) / busy, 3) if busy else None)
    with open(a.out, "w") as f:
        json.dump(result, f, indent=1)
    p = result["probes"]
    print("flood: %s; busy %.1f s; probes %d (200: %d, 503: %d, other %d), longest without a 200 %.1f s; scheduler CPU "
          "share %s" % (", ".join("%d tokens %s in %.1f s" % (lv["tokens"], lv["status"], lv["seconds"]) for lv in levels),
                        busy, p["count"], p["ok"], p["503"], p["other"], p["longest_without_200_s"],
                        result["scheduler_cpu_share"]))
    return 0 if levels[-1]["status"] == 200 else 1


# --- systemd --------------------------------------------------------------------------------
def show(unit, props):
    out = subprocess.run(["systemctl", "show", unit] + ["-p" + p for p in props], stdout=subprocess.PIPE,
                         stderr=subprocess.DEVNULL, universal_newlines=True, check=False).stdout
    return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)


WATCHED = ("ActiveState", "SubState", "Result", "NRestarts", "MainPID")


def watch(a):
    before = None
    with open(a.file, "a") as f:
        while True:
            now = show(a.unit, WATCHED)
            if now != before:
                f.write(json.dumps(dict(now, t=round(time.time(), 3))) + "\n")
                f.flush()
                before = now
            time.sleep(0.2)


def restarts(a):
    """{left_active, result, restarted (activating again), active_again, n_restarts} after SINCE, from a watch file."""
    with open(a.file) as f:
        rows = [json.loads(line) for line in f if line.strip()]
    out = {"left_active": None, "result": None, "auto_restart": None, "active_again": None, "n_restarts": None,
           "states": []}
    for r in rows:
        if r["t"] < a.since:
            continue
        out["states"].append("%.1f %s/%s %s %s" % (r["t"] - a.since, r.get("ActiveState"), r.get("SubState"),
                                                   r.get("Result"), r.get("NRestarts")))
        if out["left_active"] is None and r.get("ActiveState") != "active":
            out["left_active"] = round(r["t"] - a.since, 3)
        if out["left_active"] is not None and r.get("Result") not in (None, "success") and out["result"] is None:
            out["result"] = r["Result"]
        if out["left_active"] is not None and r.get("SubState") == "auto-restart" and out["auto_restart"] is None:
            out["auto_restart"] = round(r["t"] - a.since, 3)
        if out["left_active"] is not None and r.get("ActiveState") == "active" and out["active_again"] is None:
            out["active_again"] = round(r["t"] - a.since, 3)
            out["n_restarts"] = r.get("NRestarts")
    print(json.dumps(out))
    return 0


def schedulers(a):
    main = int(show(a.unit, ["MainPID"]).get("MainPID") or 0)
    kids = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open("/proc/%s/stat" % d) as f:
                    kids.setdefault(int(f.read().rsplit(")", 1)[1].split()[1]), []).append(int(d))
            except (OSError, IndexError, ValueError):
                continue
    todo, found = list(kids.get(main, [])), []
    while todo:
        pid = todo.pop()
        todo.extend(kids.get(pid, []))
        try:
            with open("/proc/%d/cmdline" % pid, "rb") as f:
                if f.read().startswith(SCHEDULER.encode()):
                    found.append(pid)
        except OSError:
            continue
    for pid in sorted(found):
        print(pid)
    return 0 if found else 1


# --- /dev/shm and the caches ---------------------------------------------------------------------
def shm(a):
    loader = SourceFileLoader("inferops_sweep_shm", SWEEP)  # the unit's ExecStartPre, a script without .py
    sweep = importlib.util.module_from_spec(importlib.util.spec_from_loader(loader.name, loader))
    loader.exec_module(sweep)
    segs = sweep.look(a.version, a.uid)
    named = set(s["name"] for s in segs)
    others = []
    for n in sorted(os.listdir(sweep.SHM_DIR)):
        if n not in named:
            try:
                others.append({"name": n, "bytes": os.lstat(os.path.join(sweep.SHM_DIR, n)).st_size})
            except OSError:
                continue
    out = {"segments": [{"name": s["name"], "bytes": s["bytes"], "live": s["live"], "why": s["why"]} for s in segs],
           "left_behind": sorted(s["name"] for s in segs if not s["live"]),
           "live": sorted(s["name"] for s in segs if s["live"]),
           "bytes": sum(s["bytes"] for s in segs), "others": others}
    print(json.dumps(out))
    return 0


def unquote(value):
    """A value of an EnvironmentFile line as systemd_env_file_value writes it (double-quoted, \\ escapes)."""
    if len(value) >= 2 and value[0] == value[-1] == '"':
        return re.sub(r"\\(.)", r"\1", value[1:-1])
    return value


def size(folder):
    total, files = 0, 0
    try:
        if not stat.S_ISDIR(os.lstat(folder).st_mode):
            return None, 0
    except OSError:
        return None, 0
    for d, dummy, names in os.walk(folder):
        for n in names:
            try:
                st = os.lstat(os.path.join(d, n))
            except OSError:
                continue
            if stat.S_ISREG(st.st_mode):
                total, files = total + st.st_size, files + 1
    return total, files


def caches(a):
    env = {}
    with open(a.envfile) as f:
        for line in f:
            if "=" in line and not line.startswith("#"):
                k, v = line.rstrip("\n").split("=", 1)
                env[k.strip()] = unquote(v.strip())
    out = {}
    for var in CACHE_VARS:
        if var in env:
            folder = os.path.join(env[var], ".cache", "flashinfer") if var == "FLASHINFER_WORKSPACE_BASE" else env[var]
            b, n = size(folder)
            out[var] = {"path": env[var], "folder": folder, "bytes": b, "files": n}
    out["HOME"] = env.get("HOME")
    print(json.dumps(out))
    return 0


def sizes(a):
    out = {}
    for d in a.dirs:
        b, n = size(d)
        out[d] = {"bytes": b, "files": n}
    print(json.dumps(out))
    return 0


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    sub = p.add_subparsers(dest="cmd")
    f = sub.add_parser("flood")
    f.add_argument("--port", type=int, required=True)
    f.add_argument("--cap", type=int, required=True, help="the longest prompt the server takes, in tokens")
    f.add_argument("--start", type=int, default=131072, help="the first prompt's tokens")
    f.add_argument("--target", type=float, required=True, help="seconds one prompt should keep the server busy")
    f.add_argument("--budget", type=float, required=True, help="seconds for the whole flood")
    f.add_argument("--prompts", type=int, default=2, help="prompts sent at once at the end")
    f.add_argument("--hct", type=float, default=20.0, help="SGLANG_HEALTH_CHECK_TIMEOUT of the server")
    f.add_argument("--text", action="store_true")
    f.add_argument("--out", required=True)
    w = sub.add_parser("watch")
    w.add_argument("unit")
    w.add_argument("file")
    r = sub.add_parser("restarts")
    r.add_argument("file")
    r.add_argument("since", type=float)
    s = sub.add_parser("schedulers")
    s.add_argument("unit")
    m = sub.add_parser("shm")
    m.add_argument("version")
    m.add_argument("uid", type=int, nargs="?", default=os.getuid())
    c = sub.add_parser("caches")
    c.add_argument("envfile")
    z = sub.add_parser("sizes")
    z.add_argument("dirs", nargs="+")
    a = p.parse_args(argv)
    run = {"flood": flood, "watch": watch, "restarts": restarts, "schedulers": schedulers, "shm": shm,
           "caches": caches, "sizes": sizes}.get(a.cmd)
    if run is None:
        p.error("a command: flood, watch, restarts, schedulers, shm, caches, sizes")
    return run(a)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
