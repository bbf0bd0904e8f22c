"""weights.py's readings on a CPU, each failing with what it saw: `python3 tests/gpu/real/weights_double.py WORKDIR`
(after `source tests/testbed/env.sh`).

- phases: a restart's journal (`journalctl -o json` lines) holding 0.5.17's own lines, as the live server wrote them
  (day2.md): the old engine's stop, the launcher's imports, the scheduler's start, `Zero-copy: mapped 291 tensors`,
  `Load weight end. elapsed=0.06 s`, the port, the warm-up and the first /health 200 of a prober;
- backs: a watch file where the daemon was SIGKILLed and both units came back once, and one with a crash loop;
- files: the daemon's socket and ready file in a unit's private /tmp, none in the shared /tmp;
- the SGLang double as 0.5.15 launched through `weights.py stamp`: the port, the warm-up and a generation read from
  its stamped log (the double logs neither `server_args=ServerArgs(` nor `elapsed=`: those are read only from the
  journal case above);
- summary: two calls' weights.json merged, the done-when evaluated, the 547 GB arithmetic, the markdown written.
"""
import json
import os
import shutil
import socket
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", "..", ".."))
sys.path.insert(0, HERE)
import weights  # noqa: E402  pylint: disable=wrong-import-position

FAILED = []


def check(name, ok, detail):
    print("%-22s %s %s" % (name, "ok" if ok else "FAILED", detail), flush=True)
    if not ok:
        FAILED.append(name)


def journal_case(work):
    t0 = 1000.0
    lines = [(0.2, "Stopping sglang-30020.service - SGLang..."), (4.9, "SIGTERM received. Draining requests"),
             (5.1, "sglang-30020.service: Deactivated successfully."), (5.1, "Stopped sglang-30020.service - SGLang."),
             (5.3, "Starting sglang-30020.service - SGLang..."),
             (22.4, "[2026-12-06 10:00:22] server_args=ServerArgs(model_path='/m', weight_cache_mode='client')"),
             (41.0, "[2026-12-06 10:00:41] Load weight begin. avail mem=61.20 GB"),
             (41.05, "[IpcModelLoader] Zero-copy: mapped 291 tensors (0 new post-quant), time=0.041s"),
             (41.06, "Load weight end. elapsed=0.06 s, type=LlamaForCausalLM, avail mem=61.10 GB, mem usage=0.10 GB."),
             (42.0, "KV Cache is allocated. max_total_num_tokens=32768, max_prefill_tokens=16384"),
             (44.5, "INFO:     Uvicorn running on http://127.0.0.1:30020 (Press CTRL+C to quit)"),
             (47.6, "The server is fired up and ready to roll!"), (47.9, "Started sglang-30020.service - SGLang.")]
    path = os.path.join(work, "journal.json")
    with open(path, "w") as f:
        f.write(json.dumps({"__REALTIME_TIMESTAMP": str(int((t0 - 30) * 1e6)), "MESSAGE": "an older line"}) + "\n")
        for dt, msg in lines:
            f.write(json.dumps({"__REALTIME_TIMESTAMP": str(int((t0 + dt) * 1e6)), "MESSAGE": msg}) + "\n")
    probes = [(t0 - 0.5, 200), (t0 - 0.05, 200)] + [(t0 + 0.05 * k, 503 if k < 100 else 0) for k in range(1, 960)] + \
        [(t0 + 48.05, 200)]
    show = {"InactiveEnterTimestamp": t0 + 5.1, "ExecMainStartTimestamp": t0 + 5.4, "ActiveEnterTimestamp": t0 + 47.9}
    v = weights.phases_of(weights.read_log(path), t0, probes, show)
    ph = v["phases"]
    want = {"old_engine_stop_s": 4.9, "to_main_process_s": 0.3, "launcher_imports_s": 17.0, "scheduler_start_s": 18.6,
            "weight_load_s": 0.06, "kv_pool_s": 0.94, "to_port_s": 2.5, "warm_up_s": 3.1, "to_first_200_s": 0.45}
    bad = {k: (ph.get(k), w) for k, w in want.items() if ph.get(k) is None or abs(ph[k] - w) > 0.011}
    check("phases", not bad and v.get("sglang_weight_load_s") == 0.06 and v.get("zero_copy_tensors") == 291
          and abs(v.get("gap_s", 0) - 48.1) < 0.011, "%s; gap %s; load %s; mapped %s" % (
              bad or "every phase as written", v.get("gap_s"), v.get("sglang_weight_load_s"), v.get("zero_copy_tensors")))
    check("utc_epoch", weights.utc_epoch("Sat 1970-01-01 00:16:40.500000 UTC") == 1000.5,
          "%s" % weights.utc_epoch("Sat 1970-01-01 00:16:40.500000 UTC"))


def backs_case():
    t0 = 2000.0
    s, d = "sglang-30020.service", "sglang-30020-weights.service"

    def row(dt, unit, state, sub, pid, n, result="success"):
        return {"t": t0 + dt, "unit": unit, "ActiveState": state, "SubState": sub, "MainPID": pid, "NRestarts": n,
                "Result": result}
    once = [row(-50, s, "active", "running", "11", "0"), row(-50, d, "active", "running", "10", "0"),
            row(0.3, d, "deactivating", "stop-sigterm", "0", "0", "signal"), row(0.4, s, "deactivating", "stop-sigterm",
                                                                                 "0", "0"),
            row(1.5, d, "activating", "auto-restart", "0", "1", "signal"), row(2.0, s, "inactive", "dead", "0", "0"),
            row(12.0, d, "active", "running", "20", "1", "signal"), row(13.0, s, "activating", "start", "21", "0"),
            row(60.0, s, "active", "running", "21", "0")]
    b = {u: weights.backs_of(once, t0, u) for u in (s, d)}
    check("backs_once", b[d]["active_again"] == [12.0] and b[s]["active_again"] == [60.0]
          and b[d]["main_pids"] == ["20"] and b[d]["results"] == ["signal"], json.dumps({u: {k: b[u][k] for k in (
              "active_again", "main_pids", "results")} for u in b}))
    loop = once + [row(70, s, "activating", "auto-restart", "0", "1", "exit-code"),
                   row(80, s, "active", "running", "31", "1")]
    bl = weights.backs_of(loop, t0, s)
    check("backs_loop", bl["active_again"] == [60.0, 80.0] and bl["results"] == ["exit-code"],
          "active again %s, results %s" % (bl["active_again"], bl["results"]))


def files_case():
    unit = "inferops-test-%d-weights.service" % os.getpid()
    d = "/tmp/systemd-private-0123abcd-%s-XyZ/tmp" % unit
    os.makedirs(d)
    try:
        for name in weights.SOCKET_NAMES:
            with open(os.path.join(d, name), "w") as f:
                f.write("pid=4242\nconfig={}\n" if name.endswith(".ready") else "")
        out = subprocess.run([sys.executable, os.path.join(HERE, "weights.py"), "files", unit], stdout=subprocess.PIPE,
                             universal_newlines=True, check=False).stdout
        r = json.loads(out)
        sock = r["private"].get("sglang_weight_cache_rank0.sock", {})
        check("files", sock.get("path", "").startswith(d) and r["private"]["sglang_weight_cache_rank0.ready"]["pid"]
              == "pid=4242" and set(r["shared"]) == set(weights.SOCKET_NAMES), out.strip())
    finally:
        shutil.rmtree(os.path.dirname(d))


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def double_case(work):
    model = os.path.join(work, "model")
    os.makedirs(model, exist_ok=True)
    with open(os.path.join(model, "config.json"), "w") as f:
        f.write("{}")
    port = free_port()
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "tests", "sglang_double"), SGLANG_DOUBLE_VERSION="0.5.15",
               SGLANG_DOUBLE_LOAD_SECONDS="0.5", SGLANG_DOUBLE_WARMUP_SECONDS="0.3")
    log = os.path.join(work, "hand.log")
    t0 = time.time()
    server = subprocess.Popen([sys.executable, "-m", "sglang.launch_server", "--model-path", model, "--port", str(port),
                               "--host", "127.0.0.1"], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              stdin=subprocess.DEVNULL, start_new_session=True)
    stamper = subprocess.Popen([sys.executable, os.path.join(HERE, "weights.py"), "stamp", log], stdin=server.stdout)
    server.stdout.close()
    try:
        ready = None
        while time.time() - t0 < 30 and ready is None:
            code, dummy = http_status(port)
            ready = time.time() if code == 200 else None
            time.sleep(0.1)
        gen = subprocess.run([sys.executable, os.path.join(HERE, "weights.py"), "generate", str(port)],
                             stdout=subprocess.PIPE, universal_newlines=True, check=False).stdout
        v = weights.phases_of(weights.read_log(log), t0)
        m = v["marks"]
        check("double_stamped", ready is not None and "port_open" in m and "fired_up" in m
              and m["port_open"] <= m["fired_up"] <= ready - t0 + 0.5 and json.loads(gen)["status"] == 200,
              "marks %s; ready at %s s; generate %s" % (m, None if ready is None else round(ready - t0, 2), gen.strip()))
    finally:
        os.killpg(server.pid, 15)
        server.wait(20)
        stamper.wait(20)


def http_status(port):
    import urllib.error  # pylint: disable=import-outside-toplevel
    import urllib.request  # pylint: disable=import-outside-toplevel
    try:
        with urllib.request.urlopen("http://127.0.0.1:%d/health" % port, timeout=2) as r:
            return r.status, None
    except urllib.error.HTTPError as e:
        return e.code, None
    except OSError as e:
        return 0, e


def summary_case(work):
    first = {"restart": {"ok": True, "detail": ""}, "flag_change_keeps_daemon": {"ok": True, "detail": ""},
             "daemon_killed_both_back_once": {"ok": True, "detail": ""},
             "bad_flag_rolled_back": {"ok": False, "detail": "left out"},
             "values": {"model_bytes": 16060522496, "restart": {"gap_s": 47.8, "sglang_weight_load_s": 0.06},
                        "gpu_cache": {"by_unit_mib": {"sglang-30020-weights.service": 16117}, "used_mib": 21773}}}
    second = {"bad_flag_rolled_back": {"ok": True, "detail": ""},
              "values": {"nocache_restart_warm": {"gap_s": 50.6, "sglang_weight_load_s": 2.9},
                         "nocache_restart_cold": {"gap_s": 59.0, "sglang_weight_load_s": 12.0}}}
    paths = []
    for n, r in (("1", first), ("2", second)):
        paths.append(os.path.join(work, "weights-%s.json" % n))
        with open(paths[-1], "w") as f:
            json.dump(r, f)
    md = os.path.join(work, "restart.md")
    proc = subprocess.run([sys.executable, os.path.join(HERE, "weights.py"), "summary", "--md", md] + paths,
                          stdout=subprocess.PIPE, universal_newlines=True, check=False)
    s = json.loads(proc.stdout)
    rows = {r["disk_gbps"]: r for r in s["paper"]["rows"]}
    check("summary", proc.returncode == 0 and all(s["done_when"].values()) and abs(rows[2.0]["read_s"] - 273.5) < 0.1
          and abs(s["paper"]["start_without_read_s"] - 47.7) < 0.01 and os.path.getsize(md) > 500,
          "done_when %s; 547 GB at 2 GB/s: %s" % (s["done_when"], rows.get(2.0)))


def main(work):
    os.makedirs(work, exist_ok=True)
    journal_case(work)
    backs_case()
    files_case()
    double_case(work)
    summary_case(work)
    print("%d failed: %s" % (len(FAILED), " ".join(FAILED)) if FAILED else "all passed")
    return 1 if FAILED else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "/tmp/weights-double"))
