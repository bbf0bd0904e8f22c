"""weights.py's readings on a CPU, each failing with what it saw: `python3 tests/gpu/real/weights_double.py WORKDIR`
(after `source tests/testbed/env.sh`).

- phases: a restart's journal (`journalctl -o json` lines) holding 0.5.17's own lines, as the live server wrote them
  (day2.md): the old engine's stop, the launcher's imports, the scheduler's start, `Zero-copy: mapped 291 tensors`,
  `Load weight end. elapsed=0.06 s`, the port, the warm-up and the first /health 200 of a prober;
- backs: a watch file where the daemon was SIGKILLed and both units came back once, and one with a crash loop;
- watch: `weights.py watch` against a systemctl that replays systemd 252's kill sequence (the daemon's Restart=, the
  server's unit restarted as a job of its Requires=): both back once; against one with no systemd to ask (the
  machine outside the namespace, where the first H100 run's watch ran): error lines, and the verdict fails; the
  watch ends once its parent is gone;
- once: the kill step's verdict: the real sequence passes, the H100 run's empty watch, a loop, a unit not back, a
  unit that left again, two daemon restarts each fail; a return between two polls still counts;
- watch_start (lib.sh) in a real pid namespace: the suite's shell exits and its output closes at once, the watcher
  gone (the first H100 call waited for its 600-s limit on a watcher that outlived the suite);
- namespaces: an earlier run's namespace (a real pid+mount namespace whose PID 1 is named systemd, a server in it)
  found without a record and ended with all in it; one whose suite still runs left alone; what the earlier run
  installed and its WORK removed, the current WORK kept; a process outside whose command line names systemd and
  unshare untouched;
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


FAKE_SYSTEMCTL = r"""#!%(py)s
import json, os, sys, time
mode = os.environ.get("FAKE_SYSTEMCTL", "none")
if mode == "none":  # what the machine's own systemctl says outside the namespace
    sys.stderr.write("System has not been booted with systemd as init system (PID 1). Can't operate.\n")
    sys.exit(1)
with open(mode) as f:
    script = json.load(f)
unit = [a for a in sys.argv[1:] if not a.startswith("-") and a != "show"][0]
props = [a[2:] for a in sys.argv[1:] if a.startswith("-p")]
dt = time.time() - script["t0"]
state = [row for row in script[unit] if row[0] <= dt][-1][1]
print("\n".join("%%s=%%s" %% (p, state.get(p, "")) for p in props))
"""

S_UNIT, D_UNIT = "sglang-30020.service", "sglang-30020-weights.service"


def state(active, sub, result, n, pid, enter):
    return {"ActiveState": active, "SubState": sub, "Result": result, "NRestarts": n, "MainPID": pid,
            "ActiveEnterTimestampMonotonic": enter}


# systemd 252 after `systemctl kill -s SIGKILL` of the daemon's unit (the H100 run's journal, times shortened; the
# kill at 1.0): the daemon fails, its Restart= schedules a restart (NRestarts 1), which restarts the server's unit
# that Requires= it as a job (the engine had exited by itself: its own NRestarts stays 0); both active once more
SEQ_252 = {
    D_UNIT: [(0, state("active", "running", "success", "0", "10", "100")),
             (1.1, state("failed", "failed", "signal", "0", "0", "100")),
             (1.3, state("activating", "auto-restart", "signal", "1", "0", "100")),
             (2.0, state("activating", "start", "signal", "1", "20", "100")),
             (2.8, state("active", "running", "signal", "1", "20", "280"))],
    S_UNIT: [(0, state("active", "running", "success", "0", "11", "100")),
             (1.4, state("deactivating", "stop-sigterm", "success", "0", "11", "100")),
             (1.6, state("inactive", "dead", "success", "0", "0", "100")),
             (2.8, state("activating", "start", "success", "0", "21", "100")),
             (3.6, state("active", "running", "success", "0", "21", "360"))]}


def rows_of(seq, t0):
    return sorted(([dict(st, unit=u, t=t0 + dt) for dt, st in seq[u]] for u in seq), key=len)[0] + \
        sorted(([dict(st, unit=u, t=t0 + dt) for dt, st in seq[u]] for u in seq), key=len)[1]


def watch_case(work):
    bindir = os.path.join(work, "fakebin")
    os.makedirs(bindir, exist_ok=True)
    with open(os.path.join(bindir, "systemctl"), "w") as f:
        f.write(FAKE_SYSTEMCTL % {"py": sys.executable})
    os.chmod(os.path.join(bindir, "systemctl"), 0o755)
    for mode in ("replay", "none"):
        path = os.path.join(work, "watch-%s.jsonl" % mode)
        if os.path.exists(path):
            os.unlink(path)
        t0 = time.time()
        env = dict(os.environ, PATH=bindir + os.pathsep + os.environ["PATH"], FAKE_SYSTEMCTL="none")
        if mode == "replay":
            env["FAKE_SYSTEMCTL"] = os.path.join(work, "seq.json")
            with open(env["FAKE_SYSTEMCTL"], "w") as f:
                json.dump(dict(SEQ_252, t0=t0), f)
        # started by a shell that exits after 4.5 s: the watch must end by itself then (never killed here)
        sh = subprocess.Popen(["sh", "-c", '"$0" "$1" watch "$2" "$3" "$4" & echo $!; sleep 4.5',
                               sys.executable, os.path.join(HERE, "weights.py"), path, S_UNIT, D_UNIT],
                              env=env, stdout=subprocess.PIPE, universal_newlines=True)
        pid = int(sh.stdout.readline())
        sh.wait(20)
        ended = False
        for dummy in range(30):
            try:
                os.kill(pid, 0)
            except OSError:
                ended = True
                break
            time.sleep(0.1)
        if not ended:
            os.kill(pid, 9)  # the watch this case started
        with open(path) as f:
            rows = [json.loads(line) for line in f if line.strip()]
        v = weights.once_of(rows, t0 + 1.0, S_UNIT, D_UNIT, "0", "1")
        if mode == "replay":
            check("watch_252", ended and v["ok"] and v["backs"][D_UNIT]["active_again"] and
                  v["backs"][S_UNIT]["main_pids"] == ["21"],
                  "ended with its shell: %s; once %s %s; daemon %s; server %s" % (
                      ended, v["ok"], v["why"], v["backs"][D_UNIT]["states"], v["backs"][S_UNIT]["states"]))
        else:
            check("watch_no_systemd", ended and all("error" in r for r in rows) and rows and not v["ok"]
                  and "read no state" in " ".join(v["why"]),
                  "ended: %s; rows %s; once %s %s" % (ended, rows[:2], v["ok"], v["why"]))


def once_case():
    t0 = 5000.0
    rows = rows_of(SEQ_252, t0)
    good = weights.once_of(rows, t0 + 1.0, S_UNIT, D_UNIT, "0", "1")
    # the first H100 call's watch.jsonl as it came back: run outside the namespace, it read no state at all
    empty = [{"unit": S_UNIT, "t": t0 - 100}, {"unit": D_UNIT, "t": t0 - 100}]
    loop = rows + [dict(state("activating", "auto-restart", "exit-code", "1", "0", "360"), unit=S_UNIT, t=t0 + 9),
                   dict(state("active", "running", "exit-code", "1", "31", "1900"), unit=S_UNIT, t=t0 + 19)]
    not_back = [r for r in rows if not (r["unit"] == S_UNIT and r["ActiveState"] == "active" and r["t"] > t0 + 1)]
    left = rows + [dict(state("deactivating", "stop-sigterm", "exit-code", "0", "21", "360"), unit=S_UNIT, t=t0 + 9)]
    # a return between two polls: the watch never saw the server inactive, only a new ActiveEnterTimestamp and MainPID
    quick = [r for r in rows if not (r["unit"] == S_UNIT and r["ActiveState"] != "active")]
    cases = {"empty": (empty, "0", "1"), "loop": (loop, "0", "1"), "not_back": (not_back, "0", "1"),
             "left_again": (left, "0", "1"), "two_daemon_restarts": (rows, "0", "2")}
    bad = {k: weights.once_of(r, t0 + 1.0, S_UNIT, D_UNIT, n0, n1) for k, (r, n0, n1) in cases.items()}
    q = weights.once_of(quick, t0 + 1.0, S_UNIT, D_UNIT, "0", "1")
    check("once", good["ok"] and q["ok"] and not any(v["ok"] for v in bad.values()),
          "the 252 sequence: %s %s; between polls: %s %s; failing as they must: %s" % (
              good["ok"], good["why"], q["ok"], q["why"], {k: v["why"] for k, v in bad.items()}))


FAKE_INIT = """#!/bin/sh
# PID 1 of the namespace, named systemd: one "server" in it, as a unit's would be
%(py)s -c 'import time; time.sleep(600)' -m sglang.launch_server --port 30020 &
wait
"""


def namespace(work, name):
    """A real pid+mount namespace whose PID 1 is named systemd, started as lib.sh's systemd_boot starts one: its pid
    here (or None where namespaces cannot be made: not root)."""
    d = os.path.join(work, "init-" + name)
    os.makedirs(d, exist_ok=True)
    init = os.path.join(d, "systemd")
    with open(init, "w") as f:
        f.write(FAKE_INIT % {"py": sys.executable})
    os.chmod(init, 0o755)
    starter = subprocess.Popen(["setsid", "unshare", "--fork", "--pid", "--mount-proc", "--mount", "--propagation",
                                "private", "/bin/sh", "-c", "exec " + init], stdin=subprocess.DEVNULL,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for dummy in range(50):
        kids = subprocess.run(["pgrep", "-x", "systemd", "-P", str(starter.pid)], stdout=subprocess.PIPE,
                              universal_newlines=True, check=False).stdout.split()
        if kids:
            return int(kids[0]), starter
        if starter.poll() is not None:
            return None, starter
        time.sleep(0.1)
    return None, starter


def ns_members(pid):
    try:
        ns = os.readlink("/proc/%d/ns/pid" % pid)
    except OSError:
        return []
    out = []
    for p in os.listdir("/proc"):
        if p.isdigit():
            try:
                if os.readlink("/proc/%s/ns/pid" % p) == ns:
                    out.append(int(p))
            except OSError:
                pass
    return out


def alive(pid):
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    return not (open("/proc/%d/stat" % pid).read().split(") ", 1)[1].startswith("Z"))


def watch_start_case(work):
    init, starter = namespace(work, "watch")
    if init is None:
        check("watch_start", False, "no pid namespace could be made here (root and unshare needed)")
        return
    logs = os.path.join(work, "logs-ws")
    os.makedirs(logs, exist_ok=True)
    try:
        script = ('py=%s; out=%s; . %s; ns_pid=%d; watch_start %s watch %s/w.jsonl u.service; echo "$watcher"; '
                  'sleep 1; kill "$watcher"' % (sys.executable, logs, os.path.join(HERE, "lib.sh"), init,
                                                os.path.join(HERE, "weights.py"), logs))
        t = time.time()
        p = subprocess.Popen(["bash", "-c", script], stdout=subprocess.PIPE, universal_newlines=True)
        out = p.stdout.read()  # until EOF: every holder of the shell's output gone
        closed = round(time.time() - t, 1)
        p.wait(10)
        time.sleep(0.6)
        left = [q for q in ns_members(init) if q != init and "weights.py" in open("/proc/%d/cmdline" % q).read()]
        wrote = os.path.exists(os.path.join(logs, "w.jsonl")) and os.path.getsize(os.path.join(logs, "w.jsonl")) > 0
        check("watch_start", out.strip().isdigit() and wrote and closed < 4 and not left,
              "the watch ran (its nsenter %r, its file written: %s); the shell's output closed after %s s (its own "
              "part 1 s); watchers left in the namespace: %s" % (out.strip(), wrote, closed, left))
    finally:
        os.kill(init, 9)  # the namespace this case made
        starter.wait(10)


def namespaces_case(work):
    state, root = os.path.join(work, "state"), os.path.join(work, "root")
    shutil.rmtree(state, ignore_errors=True)
    shutil.rmtree(root, ignore_errors=True)
    units = os.path.join(root, "etc/systemd/system")
    os.makedirs(os.path.join(units, "multi-user.target.wants"))
    os.makedirs(os.path.join(units, "sglang-30020.service.d"))
    for name in ("sglang-30020.service", "sglang-30020-weights.service", "systemd-tmpfiles-setup.service.keep"):
        open(os.path.join(units, name), "w").close()
    os.symlink("../sglang-30020.service", os.path.join(units, "multi-user.target.wants", "sglang-30020.service"))
    for d in ("etc/inferops/sglang", "var/lib/inferops/cutover/30020"):
        os.makedirs(os.path.join(root, d))
    for w in ("work.earlier", "work.now"):
        os.makedirs(os.path.join(state, w, "models"))
    env = dict(os.environ, INFEROPS_REAL_STATE=state, INFEROPS_REAL_ROOT=root)
    a, sa = namespace(work, "a")  # an earlier call's: not recorded (booted before records existed)
    b, sb = namespace(work, "b")  # a run beside this one: recorded, its suite's shell alive
    # a process outside any namespace whose command line names what a pattern would match
    decoy = subprocess.Popen(["sh", "-c", "sleep 60; echo /lib/systemd/systemd --system unshare --fork"])
    owner = subprocess.Popen(["sleep", "60"])
    try:
        if a is None or b is None:
            check("namespaces", False, "no pid namespace could be made here (root and unshare needed)")
            return
        subprocess.run([sys.executable, os.path.join(HERE, "namespaces.py"), "record", str(b), str(owner.pid)],
                       env=env, check=True)
        in_a = ns_members(a)
        end = [sys.executable, os.path.join(HERE, "namespaces.py"), "end", "--keep", os.path.join(state, "work.now"),
               "--gpu-wait", "0"]
        first = subprocess.run(end, env=env, stdout=subprocess.PIPE, universal_newlines=True, check=False).stdout
        gone_a = not any(alive(p) for p in in_a)
        kept_b = alive(b) and os.path.exists(os.path.join(units, "sglang-30020.service"))
        owner.kill()
        owner.wait()
        in_b = ns_members(b)
        second = subprocess.run(end, env=env, stdout=subprocess.PIPE, universal_newlines=True, check=False).stdout
        gone_b = not any(alive(p) for p in in_b)
        left = sorted(os.path.relpath(os.path.join(d, n), root) for d, ds, fs in os.walk(root) for n in fs + ds
                      if "sglang-" in n or n in ("sglang", "cutover"))
        works = sorted(os.listdir(state))
        check("namespaces", gone_a and len(in_a) >= 2 and kept_b and gone_b and len(in_b) >= 2 and not left
              and "work.now" in works and "work.earlier" not in works and decoy.poll() is None
              and "sglang" in first and os.path.exists(os.path.join(units, "systemd-tmpfiles-setup.service.keep")),
              "the unrecorded one (%d processes) ended: %s; the live run's kept: %s, then ended: %s; left installed "
              "%s; STATE %s; the decoy alive: %s; said: %s || %s" % (
                  len(in_a), gone_a, kept_b, gone_b, left, works, decoy.poll() is None, first.strip(),
                  second.strip()))
    finally:
        for pid in (a, b):
            if pid and alive(pid):
                os.kill(pid, 9)  # the namespaces this case made
        for p in (sa, sb, decoy, owner):
            p.kill()
            p.wait()


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
    watch_case(work)
    once_case()
    watch_start_case(work)
    namespaces_case(work)
    files_case()
    double_case(work)
    summary_case(work)
    print("%d failed: %s" % (len(FAILED), " ".join(FAILED)) if FAILED else "all passed")
    return 1 if FAILED else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "/tmp/weights-double"))
