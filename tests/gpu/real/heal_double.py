"""heal.py's readings against the SGLang double as 0.5.15, on a CPU (no systemd, no namespace): a rehearsal of the heal
suite's Python parts, each failing with what it saw.

  python3 tests/gpu/real/heal_double.py WORKDIR

- flood: a prompt's prefill (SGLANG_DOUBLE_PREFILL_SECONDS_PER_TOKEN) keeps /health_generate (timeout 1 s) from a 200
  for longer than a watchdog of 4 s, while the scheduler works: the longest stretch without a 200 is measured, 503s
  counted, the scheduler's CPU share high;
- a stopped scheduler (SIGSTOP): /health_generate 503, no CPU used (what the checker and the watchdog see);
- shm: the segments a SIGKILLed --tp 2 server leaves (the unit's sweep's own look()) are seen as left behind, those of
  a live server as live; only this rehearsal's own are removed afterwards;
- restarts: a watch file's change lines read into when the unit left active, its result and when it was back;
- caches: a unit's environment file as the collection writes it (systemd_env_file_value), sizes of its folders.
"""
import json
import os
import signal
import socket
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", "..", ".."))
sys.path.insert(0, HERE)
import heal  # noqa: E402  pylint: disable=wrong-import-position
import realserver  # noqa: E402  pylint: disable=wrong-import-position

FAILED = []


def check(name, ok, detail):
    print("%-28s %s %s" % (name, "ok" if ok else "FAILED", detail), flush=True)
    if not ok:
        FAILED.append(name)


def double(work, name, port, args=(), **knobs):
    model = os.path.join(work, "model")
    os.makedirs(model, exist_ok=True)
    with open(os.path.join(model, "config.json"), "w") as f:
        f.write("{}")
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "tests", "sglang_double"), SGLANG_DOUBLE_VERSION="0.5.15",
               SGLANG_DOUBLE_LOAD_SECONDS="0.5", SGLANG_DOUBLE_WARMUP_SECONDS="0.3", SGLANG_DOUBLE_HEALTH_SECONDS="0.2",
               SGLANG_HEALTH_CHECK_TIMEOUT="1")
    env.update({"SGLANG_DOUBLE_" + k.upper(): str(v) for k, v in knobs.items()})
    s = realserver.Server(name, work, model, port, args, env=env)
    deadline = realserver.CLOCK.now() + 30
    while realserver.CLOCK.now() < deadline and s.http("/health", timeout=2)["status"] != 200:
        time.sleep(0.1)
    return s


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def scheduler_of(server):
    for pid, info in server.tree().items():
        if (info["cmdline"] or "").startswith("sglang::scheduler"):
            return pid
    return None


def cpu_of(pid):
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / float(os.sysconf("SC_CLK_TCK"))


def flood_case(work):
    # a word's prefill 1e-4 s: 20000 words are 2 s; the target of 6 s needs ~60000 (a 4-s watchdog in the suite's
    # terms: the longest stretch without a 200 must pass it)
    port = free_port()
    s = double(work, "flood", port, ["--tp", "1"], prefill_seconds_per_token="0.0001")
    out = os.path.join(work, "flood.json")
    try:
        rc = heal.main(["flood", "--port", str(port), "--cap", "100000", "--start", "5000", "--target", "6",
                        "--budget", "40", "--prompts", "2", "--hct", "1", "--text", "--out", out])
        with open(out) as f:
            r = json.load(f)
        p = r["probes"]
        check("flood_answers", rc == 0 and all(lv["status"] == 200 for lv in r["levels"]),
              "levels %s" % [(lv["tokens"], lv["seconds"]) for lv in r["levels"]])
        check("flood_reaches_target", r["levels"][-1]["seconds"] >= 6, "last %s" % r["levels"][-1])
        check("flood_503_while_busy", p["503"] > 0 and p["longest_without_200_s"] > 4,
              "probes %d, 503 %d, longest without a 200 %.1f s" % (p["count"], p["503"], p["longest_without_200_s"]))
        check("flood_idle_answers_200", r["probe_log"][-1][2] == 200, "last probe %s" % (r["probe_log"][-1],))
        check("flood_scheduler_busy", (r["scheduler_cpu_share"] or 0) > 0.5, "CPU share %s" % r["scheduler_cpu_share"])
        check("flood_many_prompts", r.get("flood", {}).get("prompts", 0) >= 1 and
              all(a["status"] == 200 for a in r["flood"]["answers"]), "flood %s" % r.get("flood"))

        # a stopped scheduler: /health_generate fails and the scheduler uses no CPU
        sched = scheduler_of(s)
        before = cpu_of(sched)
        os.kill(sched, signal.SIGSTOP)
        try:
            status, took = heal.http("http://127.0.0.1:%d/health_generate" % port, timeout=10)
            time.sleep(1)
            used = cpu_of(sched) - before
            check("stopped_scheduler", status == 503 and used < 0.05,
                  "status %s after %.1f s, CPU %.2f s" % (status, took, used))
        finally:
            os.kill(sched, signal.SIGCONT)
        status, dummy = heal.http("http://127.0.0.1:%d/health_generate" % port, timeout=10)
        check("continued_scheduler", status == 200, "status %s" % status)
    finally:
        s.kill_all()


def own(names, pids):
    """The names that hold one of the pids (sgl_shm_<kind>_<pid>_<hex>)."""
    return [n for n in names if any("_%d_" % p in n for p in pids)]


def shm_case(work):
    live = double(work, "live", free_port(), ["--tp", "2"])
    dead = double(work, "dead", free_port(), ["--tp", "2"])
    pids = set(dead.tree()) | set(live.tree())
    try:
        dead_pids = set(dead.tree())
        dead.kill_all()
        seen = json.loads(run_json(["shm", "0.5.15"]))
        gone = own(seen["left_behind"], dead_pids)
        kept = own(seen["live"], set(live.tree()))
        check("shm_left_behind", len(gone) > 0 and not own(seen["live"], dead_pids),
              "the killed server's left behind: %s" % gone)
        check("shm_live_kept", len(kept) > 0 and not own(seen["left_behind"], set(live.tree())),
              "the live server's: %s" % kept)
    finally:
        live.kill_all()
        seen = json.loads(run_json(["shm", "0.5.15"]))
        for n in own(seen["left_behind"] + seen["live"], pids):  # this rehearsal's own segments only
            try:
                os.unlink(os.path.join("/dev/shm", n))
            except OSError:
                pass


def run_json(args):
    return subprocess.run([sys.executable, os.path.join(HERE, "heal.py")] + args, stdout=subprocess.PIPE,
                          universal_newlines=True, check=True).stdout


def restarts_case(work):
    path = os.path.join(work, "watch.jsonl")
    rows = [(100.0, "active", "running", "success", "0"), (115.2, "deactivating", "stop-watchdog", "watchdog", "0"),
            (115.4, "activating", "auto-restart", "watchdog", "0"), (125.5, "activating", "start", "success", "1"),
            (150.1, "active", "running", "success", "1")]
    with open(path, "w") as f:
        for t, a, s, r, n in rows:
            f.write(json.dumps({"t": t, "ActiveState": a, "SubState": s, "Result": r, "NRestarts": n}) + "\n")
    r = json.loads(run_json(["restarts", path, "101"]))
    check("restarts_read", (r["left_active"], r["result"], r["auto_restart"], r["active_again"], r["n_restarts"]) ==
          (14.2, "watchdog", 14.4, 49.1, "1"), json.dumps({k: v for k, v in r.items() if k != "states"}))


def caches_case(work):
    # the collection as ansible finds it (tests/testbed/env.sh's ANSIBLE_COLLECTIONS_PATH)
    sys.path[:0] = [p for p in os.environ.get("ANSIBLE_COLLECTIONS_PATH", "").split(":") if p]
    from ansible_collections.inferops.sglang.plugins.filter.systemd import systemd_env_file_value  # pylint: disable=import-outside-toplevel
    triton = os.path.join(work, "home with space", ".triton", "cache")
    os.makedirs(os.path.join(triton, "ab"), exist_ok=True)
    with open(os.path.join(triton, "ab", "k.cubin"), "wb") as f:
        f.write(b"\0" * 1000)
    path = os.path.join(work, "unit.env")
    with open(path, "w") as f:
        for k, v in (("TRITON_CACHE_DIR", triton), ("TORCHINDUCTOR_CACHE_DIR", os.path.join(work, "no$ne")),
                     ("SGLANG_HEALTH_CHECK_TIMEOUT", "1")):
            f.write("%s=%s\n" % (k, systemd_env_file_value(v)))
    r = json.loads(run_json(["caches", path]))
    check("caches_read", r["TRITON_CACHE_DIR"]["bytes"] == 1000 and r["TRITON_CACHE_DIR"]["path"] == triton and
          r["TORCHINDUCTOR_CACHE_DIR"]["bytes"] is None and "SGLANG_HEALTH_CHECK_TIMEOUT" not in r, json.dumps(r))


def main(work):
    os.makedirs(work, exist_ok=True)
    restarts_case(work)
    caches_case(work)
    shm_case(work)
    flood_case(work)
    print("%d failed: %s" % (len(FAILED), " ".join(FAILED)))
    return 1 if FAILED else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
