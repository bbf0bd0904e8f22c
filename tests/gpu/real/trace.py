"""The trace suite: what the real SGLang 0.5.15 server does, read off live servers that run side by side on the one
GPU (tests/gpu/real/README.md lists the cases). `trace.py --models DIR --work DIR --out DIR [--deadline S]`.

Every case starts its own server detached (a session of its own) and writes what it saw, with times in seconds
since the suite began and since its server started, to OUT/trace.json (rewritten every few seconds, so a call
stopped at its limit still returns what was seen); the servers' logs go to OUT/logs.tar.xz. Nothing here judges:
tests/conformance/real/0.5.15-<gpu>.json is made from this record and the double is compared with that.
"""
import argparse
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import tarfile
import threading
import time
import traceback
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from realserver import CLOCK, GpuSampler, Server, console_script, find_child, listeners, port_open, socket_owners

KEY = "sk-trace-0515"
ROUTES = ("/health", "/health_generate", "/ready", "/v1/models", "/model_info", "/get_model_info", "/server_info",
          "/get_server_info", "/generate", "/no-such-path")
PROMPT = "The capital city of France is"
GREEDY = {"max_new_tokens": 8, "temperature": 0}
PROMPTS = (PROMPT, "Hello, how are you today?", "One, two, three,", "A quick brown fox", "systemd starts the")
LOG_EVENTS = (r"SIGTERM|SIGQUIT|Gracefully|kill_process_tree|Shutting down|shutdown|Errno 98|address already in use|"
              r"fired up|Uvicorn running|crashed|died|exit code|Force exiting|Initialization failed|warmup error|"
              r"Traceback|Error|error")
PORTS = {"main": 30000, "sigterm_before_generate_skip": 30001, "sigterm_before_generate": 30002,
         "scheduler_kill_loading": 30003, "scheduler_kill_ready": 30004, "scheduler_kill_then_sigterm": 30005,
         "port_taken_other": 30006, "ipv6_serve": 30007}


class Suite:
    def __init__(self, args):
        self.args = args
        self.deadline = args.deadline
        self.results = {"started_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "cases": {}}
        self.servers = []
        self.flags = {}
        self.lock = threading.Lock()
        self.gpu = GpuSampler(1.0)
        self.bindir = os.path.join(args.work, "bin")

    def flag(self, name):
        with self.lock:
            return self.flags.setdefault(name, threading.Event())

    def start(self, name, port=None, model="tiny", **kw):
        env = dict(os.environ, **self.args.case_env.get(name, {}))
        s = Server(name, self.args.work, os.path.join(self.args.models, model), port or self.args.ports[name],
                   env=env, **kw)
        with self.lock:
            self.servers.append(s)
        return s

    def left(self):
        return self.deadline - CLOCK.now()

    def case(self, name, fn):
        """Runs a case in its own thread; its result (or its failure) lands in results["cases"][name]."""
        def body():
            out = {}
            with self.lock:
                self.results["cases"][name] = out
            try:
                fn(self, out)
            except Exception:  # pylint: disable=broad-except
                out["error"] = traceback.format_exc()
            out["done_at"] = CLOCK.now()
        t = threading.Thread(target=body, name=name, daemon=True)
        t.start()
        return t

    def save(self):
        with self.lock:
            self.results["gpu_samples"] = self.gpu.samples
            text = json.dumps(self.results, indent=1, sort_keys=True, default=str)
        tmp = os.path.join(self.args.out, "trace.json.tmp")
        with open(tmp, "w") as f:
            f.write(text)
        os.replace(tmp, os.path.join(self.args.out, "trace.json"))


# --- helpers ------------------------------------------------------------------------------------
def sweep(s, post_with_key, host=None):
    """Every route, with and without the key: {"GET /path key|nokey": status}."""
    out = {"t": s.since()}
    for path in ROUTES:
        for keyed in (False, True):
            out["GET %s %s" % (path, "key" if keyed else "nokey")] = s.http(
                path, key=KEY if keyed else None, timeout=3, host=host)["status"]
    body = {"text": PROMPT, "sampling_params": GREEDY}
    out["POST /generate nokey"] = s.http("/generate", "POST", body=body, timeout=3, host=host)["status"]
    if post_with_key:  # a real generation: only once the server is ready (the first generate changes the server)
        out["POST /generate key"] = s.http("/generate", "POST", key=KEY, body=body, timeout=60, host=host)["status"]
    return out


def wait_port(suite, s, every=0.02, host="127.0.0.1"):
    while suite.left() > 0 and s.exited() is None:
        if port_open(host, s.port):
            return s.since()
        time.sleep(every)
    return None


def wait_ready(suite, s, key=None, host=None, every=0.1):
    """Seconds since start of the first /health 200, or None."""
    while suite.left() > 0 and s.exited() is None:
        if s.http("/health", key=key, timeout=3, host=host)["status"] == 200:
            return s.since()
        time.sleep(every)
    return None


def generation(s, body, key=None, host=None):
    r = s.http("/generate", "POST", key=key, body=body, timeout=60, host=host)
    out = {"request": body, "status": r["status"], "seconds": r["s"]}
    try:
        answer = json.loads(r["body"])
        out["text"] = answer.get("text")
        meta = answer.get("meta_info") or {}
        keys = ("prompt_tokens", "completion_tokens", "finish_reason", "cached_tokens")
        out["meta_info"] = {k: meta.get(k) for k in keys if k in meta}
        out["keys"] = sorted(answer)
        if "output_ids" in answer:
            out["output_ids"] = answer["output_ids"]
    except ValueError:
        out["body"] = r["body"][:500]
    return out


def watch(suite, s, since, until, key=None, every=0.05, host=None):
    """/health, the port and the main process every `every` s from now until it exits or CLOCK reaches until:
    the changes only, as [seconds since `since`, health status, port open]; and (rc, CLOCK time of the exit)."""
    seen, last = [], None
    while CLOCK.now() < until:
        rc = s.exited()
        if rc is not None:
            seen.append([round(CLOCK.now() - since, 3), "exited", rc])
            return seen, rc, CLOCK.now()
        h = s.http("/health", key=key, timeout=1, host=host)["status"]
        p = s.port_open(host or "127.0.0.1")
        if (h, p) != last:
            seen.append([round(CLOCK.now() - since, 3), h, p])
            last = (h, p)
        time.sleep(every)
    return seen, None, None


def scheduler_pid(suite, s, until):
    return find_child(s, "sglang::scheduler", until)


def titles(s):
    """The tree as the cutover sees it: the main process and each child's title, parent, group and session."""
    t = s.tree()
    return [{"pid": pid, "main": pid == s.pid, "ppid": i["ppid"], "pgid": i["pgid"], "sid": i["sid"],
             "cmdline": i["cmdline"], "comm": i["comm"], "same_pgid_as_main": i["pgid"] == t[s.pid]["pgid"] if s.pid in t else None,
             "same_sid_as_main": i["sid"] == t[s.pid]["sid"] if s.pid in t else None}
            for pid, i in sorted(t.items())]


def gpu_of(suite, s, since=None, until=None):
    return suite.gpu.of(set(s.known), since, until)


def finish(suite, s, out, t_event, rc, t_exit):
    out["exit_code"] = rc
    out["exit_after_s"] = round(t_exit - t_event, 3) if t_exit is not None else None
    out["alive_at_end"] = rc is None
    time.sleep(1.0)
    out["children_left"] = s.leftovers()
    g = suite.gpu.read()
    if g is not None:
        out["gpu_after"] = {"memory_used_mib": g["memory_used_mib"],
                            "apps_of_tree": {p: v for p, v in g["apps"].items() if p in s.known}}
    events = s.log_lines(LOG_EVENTS)
    out["log_events"] = events if len(events) <= 80 else events[:20] + ["..."] + events[-60:]


# --- the cases ----------------------------------------------------------------------------------
def case_main(suite, out):
    """--api-key: routes while loading and once ready, the tree, generations, then SIGTERM after ready."""
    s = suite.start("main", args=["--api-key", KEY])
    out["argv"] = s.argv
    before = {}
    while suite.left() > 0 and s.exited() is None and not s.port_open():
        if not before and s.since() > 5:
            before = {p: s.http(p, timeout=2)["status"] for p in ("/health", "/v1/models")}
        time.sleep(0.05)
    out["before_port_open"] = before
    out["port_open_s"] = s.since()
    suite.flag("main_port_open").set()
    sweeps, ready = [], None
    while suite.left() > 30 and s.exited() is None:
        if s.http("/health", timeout=3)["status"] == 200:
            ready = s.since()
            break
        sweeps.append(sweep(s, False))
        time.sleep(0.5)
    out["ready_s"] = ready
    out["loading_sweeps"] = sweeps[:2] + sweeps[-1:] if len(sweeps) > 3 else sweeps
    out["loading_sweep_count"] = len(sweeps)
    if ready is None:
        out["exit_code"] = s.exited()
        out["log_events"] = s.log_lines(LOG_EVENTS)[-60:]
        return
    out["ready_sweep"] = sweep(s, True)
    out["tree"] = titles(s)
    out["gpu_at_ready"] = suite.gpu.read()
    gens = [generation(s, {"text": p, "sampling_params": GREEDY}, KEY) for p in PROMPTS]
    gens.append(generation(s, {"text": PROMPT, "sampling_params": dict(GREEDY, logit_bias={"0": 100.0})}, KEY))
    out["generations"] = gens
    suite.flag("port_taken_sglang_done").wait(max(0, suite.left() - 25))  # then SIGTERM: the drain takes ~15 s

    long_body = {"text": PROMPT, "sampling_params": {"max_new_tokens": 1500, "temperature": 0, "ignore_eos": True}}
    inflight = {}

    def request():
        inflight.update(s.http("/generate", "POST", key=KEY, body=long_body, timeout=120))
    th = threading.Thread(target=request, daemon=True)
    th.start()
    time.sleep(0.5)
    t_term = CLOCK.now()
    out["sigterm_s"] = s.since()
    s.signal(signal.SIGTERM)
    seen, rc, t_exit = watch(suite, s, t_term, suite.deadline - 5)
    out["after_sigterm"] = seen
    th.join(5)
    try:
        meta = json.loads(inflight.get("body") or "{}").get("meta_info", {})
    except ValueError:
        meta = {}
    out["inflight_request"] = {"status": inflight.get("status"), "seconds": inflight.get("s"),
                               "completion_tokens": meta.get("completion_tokens")}
    finish(suite, s, out, t_term, rc, t_exit)
    out["gpu_series"] = gpu_of(suite, s, since=t_term - 3)


def case_port_taken_sglang(suite, out):
    """The port already held by another real server (main): the new one binds late, its warm-up talks to main."""
    suite.flag("main_port_open").wait(max(0, suite.left() - 60))
    try:
        s = suite.start("port_taken_sglang", port=suite.args.ports["main"], args=["--api-key", KEY])
        watch_port_taken(suite, s, out, sigterm_after=None)
    finally:
        suite.flag("port_taken_sglang_done").set()


def case_port_taken_other(suite, out):
    """The port held by another program (an HTTP server answering 404) before uvicorn binds; SIGTERM 5 s after the
    failed bind."""
    counts = {}

    class Dummy(BaseHTTPRequestHandler):
        def do_GET(self):  # pylint: disable=invalid-name
            counts["GET " + self.path] = counts.get("GET " + self.path, 0) + 1
            self.send_response(404)
            self.send_header("Content-Length", "0")
            self.end_headers()
        do_POST = do_GET

        def log_message(self, *a):  # pylint: disable=arguments-differ
            pass

    dummy = ThreadingHTTPServer(("127.0.0.1", suite.args.ports["port_taken_other"]), Dummy)
    threading.Thread(target=dummy.serve_forever, daemon=True).start()
    try:
        s = suite.start("port_taken_other")
        watch_port_taken(suite, s, out, sigterm_after=suite.args.port_taken_checks[0])
    finally:
        out["requests_to_the_holder"] = dict(counts)
        dummy.shutdown()
        dummy.server_close()


def watch_port_taken(suite, s, out, sigterm_after):
    out["argv"] = s.argv
    t_bind = None
    while suite.left() > 10 and s.exited() is None:
        if s.log_lines(r"Errno 98|address already in use"):
            t_bind = CLOCK.now()
            break
        time.sleep(0.2)
    out["bind_error_s"] = s.since() if t_bind else None
    sched = scheduler_pid(suite, s, CLOCK.now() + 5)
    out["scheduler_pid"] = sched
    t_term = None
    if t_bind and sigterm_after is not None:
        time.sleep(sigterm_after)
        t_term = CLOCK.now()
        s.signal(signal.SIGTERM)
        out["sigterm_after_bind_error_s"] = round(t_term - t_bind, 3)
        alive = []
        for dt in suite.args.port_taken_checks[1:]:
            while CLOCK.now() < t_term + dt and s.exited() is None and suite.left() > 10:
                time.sleep(0.05)
            alive.append([dt, s.exited() is None])
        out["alive_after_sigterm_s"] = alive
    rc, t_exit = s.wait_exit(suite.deadline - 10)
    fired = s.log_lines(r"fired up")
    out["fired_up_logged"] = bool(fired)
    out["lived_after_bind_error_s"] = round((t_exit or CLOCK.now()) - t_bind, 3) if t_bind else None
    out["watched_after_bind_error_s"] = round(CLOCK.now() - t_bind, 3) if t_bind else None
    out["exit_s"] = s.since() if rc is not None else None
    finish(suite, s, out, t_bind or s.started, rc, t_exit)
    out["scheduler_gpu_mib"] = suite.gpu.of({sched}, since=t_bind) if sched else []


def case_sigterm_before_generate(suite, out, name, extra):
    s = suite.start(name, args=extra)
    out["argv"] = s.argv
    out["port_open_s"] = wait_port(suite, s)
    if out["port_open_s"] is None:
        out["exit_code"] = s.exited()
        out["log_events"] = s.log_lines(LOG_EVENTS)[-60:]
        return
    t_term = CLOCK.now()
    s.signal(signal.SIGTERM)
    out["sigterm_after_port_open_s"] = round(t_term - s.started - out["port_open_s"], 3)
    seen, rc, t_exit = watch(suite, s, t_term, suite.deadline - 5)
    out["after_sigterm"] = seen
    out["health_503_seen"] = any(x[1] == 503 for x in seen)
    closed = [x[0] for x in seen if x[2] is False]
    out["port_closed_after_s"] = closed[0] if closed else None
    out["watched_s"] = round(CLOCK.now() - t_term, 3)
    finish(suite, s, out, t_term, rc, t_exit)
    out["gpu_series"] = gpu_of(suite, s, since=t_term)


def case_scheduler_kill_loading(suite, out):
    s = suite.start("scheduler_kill_loading")
    sched = scheduler_pid(suite, s, suite.deadline - 30)
    out["scheduler_pid"] = sched
    out["scheduler_seen_s"] = s.since()
    if sched is None:
        out["exit_code"] = s.exited()
        return
    time.sleep(3.0)
    out["port_open_at_kill"] = s.port_open()
    t_kill = CLOCK.now()
    out["kill_s"] = s.since()
    os.kill(sched, signal.SIGKILL)
    rc, t_exit = s.wait_exit(min(t_kill + 90, suite.deadline - 5))
    finish(suite, s, out, t_kill, rc, t_exit)


def case_scheduler_kill_ready(suite, out, name, then_sigterm):
    s = suite.start(name)
    out["ready_s"] = wait_ready(suite, s)
    sched = scheduler_pid(suite, s, CLOCK.now() + 5)
    out["scheduler_pid"] = sched
    if out["ready_s"] is None or sched is None:
        out["exit_code"] = s.exited()
        return
    t_kill = CLOCK.now()
    os.kill(sched, signal.SIGKILL)
    if not then_sigterm:
        seen, rc, t_exit = watch(suite, s, t_kill, min(t_kill + 90, suite.deadline - 5))
        out["after_kill"] = seen
        finish(suite, s, out, t_kill, rc, t_exit)
        return
    seen, t_term = [], None
    while CLOCK.now() < t_kill + 30 and s.exited() is None:
        h = s.http("/health", timeout=1)["status"]
        seen.append([round(CLOCK.now() - t_kill, 3), h])
        if h != 200:
            t_term = CLOCK.now()
            s.signal(signal.SIGTERM)
            break
        time.sleep(0.05)
    out["health_until_sigterm"] = seen[-5:]
    out["sigterm_after_kill_s"] = round(t_term - t_kill, 3) if t_term else None
    rc, t_exit = s.wait_exit(min(t_kill + 90, suite.deadline - 5))
    out["exit_after_kill_s"] = round(t_exit - t_kill, 3) if t_exit else None
    finish(suite, s, out, t_term or t_kill, rc, t_exit)


def case_ipv6_serve(suite, out):
    """`sglang serve --host ::` with the model whose first token ends the sequence."""
    script = console_script(suite.bindir)
    s = suite.start("ipv6_serve", model="tiny-eos", host="::", launcher=script)
    out["argv"] = s.argv
    out["port_open_s"] = wait_port(suite, s, host="::1")
    socks = listeners(s.port)
    owners = socket_owners([x["inode"] for x in socks])
    out["listeners"] = [dict(x, owner=owners.get(x["inode"]), owner_is_main=owners.get(x["inode"]) == s.pid) for x in socks]
    out["ready_s"] = wait_ready(suite, s, host="::1")
    out["answers"] = {h: {p: s.http(p, host=h, timeout=5)["status"] for p in ("/health", "/v1/models", "/model_info")}
                      for h in ("::1", "127.0.0.1")}
    out["tree"] = titles(s)
    out["generations"] = [generation(s, {"text": p, "sampling_params": GREEDY}, host="::1") for p in PROMPTS[:2]]
    out["generation_over_ipv4"] = generation(s, {"text": PROMPT, "sampling_params": GREEDY}, host="127.0.0.1")
    t_term = CLOCK.now()
    s.signal(signal.SIGTERM)
    seen, rc, t_exit = watch(suite, s, t_term, min(t_term + 60, suite.deadline - 5), host="::1")
    out["after_sigterm"] = seen
    finish(suite, s, out, t_term, rc, t_exit)


def probe_systemd_libs(suite, out):
    """What Debian 12's systemd 252 and dbus-daemon link that the GPU machine lacks (for the cutover suite's part)."""
    debs = suite.args.debs
    if not debs or not os.path.isdir(debs):
        out["skipped"] = "no .debs carried"
        return
    root = os.path.join(suite.args.work, "deb-probe")
    os.makedirs(root, exist_ok=True)
    for d in sorted(os.listdir(debs)):
        if d.endswith(".deb") and d.split("_")[0] in ("systemd", "libsystemd-shared", "dbus-daemon", "dbus-bin"):
            subprocess.run(["dpkg-deb", "-x", os.path.join(debs, d), root], check=True)
    env = dict(os.environ, LD_LIBRARY_PATH=os.path.join(root, "usr/lib/x86_64-linux-gnu/systemd"))
    missing = {}
    for rel in ("lib/systemd/systemd", "bin/systemctl", "usr/bin/dbus-daemon", "lib/systemd/systemd-journald",
                "usr/lib/x86_64-linux-gnu/systemd/libsystemd-shared-252.so"):
        path = os.path.join(root, rel)
        if not os.path.exists(path):
            missing[rel] = "absent"
            continue
        text = subprocess.run(["ldd", path], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              universal_newlines=True, check=False).stdout
        missing[rel] = sorted({line.split()[0] for line in text.splitlines() if "not found" in line})
    out["not_found"] = missing
    out["have"] = {tool: shutil.which(tool) is not None for tool in ("dpkg-deb", "unshare", "nsenter")}


def machine(out):
    out["python"] = sys.version.split()[0]
    out["platform"] = platform.platform()
    for cmd, key in ((["nvidia-smi", "--query-gpu=name,memory.total,driver_version", "--format=csv,noheader"], "gpu"),
                     ([sys.executable, "-c", "import torch, triton, transformers, sglang, uvicorn, fastapi; print("
                       "torch.__version__, triton.__version__, transformers.__version__, sglang.__version__, "
                       "uvicorn.__version__, fastapi.__version__)"], "versions")):
        try:
            out[key] = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True,
                                      timeout=120, check=False).stdout.strip()[-500:]
        except (OSError, subprocess.TimeoutExpired) as e:
            out[key] = repr(e)


CASES = {
    "main": case_main,
    "port_taken_sglang": case_port_taken_sglang,
    "port_taken_other": case_port_taken_other,
    "sigterm_before_generate_skip": lambda s, o: case_sigterm_before_generate(
        s, o, "sigterm_before_generate_skip", ["--skip-server-warmup"]),
    "sigterm_before_generate": lambda s, o: case_sigterm_before_generate(s, o, "sigterm_before_generate", []),
    "scheduler_kill_loading": case_scheduler_kill_loading,
    "scheduler_kill_ready": lambda s, o: case_scheduler_kill_ready(s, o, "scheduler_kill_ready", False),
    "scheduler_kill_then_sigterm": lambda s, o: case_scheduler_kill_ready(s, o, "scheduler_kill_then_sigterm", True),
    "ipv6_serve": case_ipv6_serve,
    "systemd_libs": probe_systemd_libs,
}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--debs", default="")
    ap.add_argument("--deadline", type=float, default=330.0, help="seconds from the start; then everything is ended")
    ap.add_argument("--cases", default=",".join(CASES))
    ap.add_argument("--ports", type=json.loads, default=PORTS, help="JSON: {case: port}")
    ap.add_argument("--case-env", type=json.loads, default={}, help="JSON: {case: {VAR: value}} for its server")
    ap.add_argument("--port-taken-checks", default="5,5,15,30",
                    help="port_taken_other: SIGTERM this many s after the bind error, then whether it lives at these s")
    args = ap.parse_args()
    args.port_taken_checks = [float(x) for x in args.port_taken_checks.split(",")]
    os.makedirs(args.work, exist_ok=True)
    os.makedirs(args.out, exist_ok=True)
    suite = Suite(args)
    suite.gpu.start()
    threads = [suite.case(name, CASES[name]) for name in args.cases.split(",")]
    m = {}
    suite.results["machine"] = m
    threading.Thread(target=machine, args=(m,), daemon=True).start()
    while any(t.is_alive() for t in threads) and suite.left() > 0:
        suite.save()
        time.sleep(3)
    for s in suite.servers:
        if s.exited() is None:
            suite.results["cases"].get(s.name, {}).setdefault("killed_at_deadline", True)
        s.kill_all()
    suite.gpu.stopped.set()
    suite.results["finished_s"] = CLOCK.now()
    suite.save()
    with tarfile.open(os.path.join(args.out, "logs.tar.xz"), "w:xz") as tar:
        for s in suite.servers:
            tar.add(s.log_path, arcname=os.path.basename(s.log_path))
    for name, res in sorted(suite.results["cases"].items()):
        brief = {k: v for k, v in res.items() if not isinstance(v, (list, dict)) and k not in ("error",)}
        print(name, json.dumps(brief, default=str))
        if "error" in res:
            print("  ERROR", res["error"].strip().splitlines()[-1])


if __name__ == "__main__":
    main()
