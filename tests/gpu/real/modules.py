"""The modules suite: the collection's modules, run as plain scripts (`python3 MODULE.py ARGS.json`, no controller),
against real SGLang 0.5.15 servers. `modules.py --models DIR --work DIR --out DIR --root REPO [--only a,b]`.

Each check is a function that fails (an AssertionError with what it saw) when the collection is wrong; every
module's result and each check's verdict and numbers go to OUT/modules.json. The checks run side by side, each
group in a thread of its own with its own servers (ports 30101 and up), so the servers load at once. The same
script runs against the SGLang double on a CPU (PYTHONPATH holding tests/sglang_double, SGLANG_DOUBLE_VERSION=0.5.15,
no nvidia-smi: the GPU readings are skipped; the double's `empty_generation` fault stands for the model tiny-eos).
"""
import argparse
import glob
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
import traceback

from realserver import (CLOCK, GpuSampler, Server, cmdline, console_script, find_child, listeners, port_open,
                        socket_owners)

KEY = "sk-modules-0515"


class Suite:
    def __init__(self, args):
        self.args = args
        self.results = {"checks": {}}
        self.servers = []
        self.lock = threading.Lock()
        self.port = 30100
        self.gpu = GpuSampler(1.0)
        tree = os.path.join(args.work, "collections", "ansible_collections", "inferops")
        os.makedirs(tree, exist_ok=True)
        link = os.path.join(tree, "sglang")
        if not os.path.lexists(link):
            os.symlink(os.path.abspath(args.root), link)
        self.collections = os.path.join(args.work, "collections")

    def next_port(self):
        with self.lock:
            self.port += 1
            return self.port

    def server(self, name, model="tiny", port=None, extra_env=None, **kw):
        env = dict(os.environ, **(extra_env or {}))
        if model == "tiny-eos":  # on the double: what the real tiny-eos does (every first token ends the sequence)
            env["SGLANG_DOUBLE_FAULTS"] = "empty_generation"
        s = Server(name, self.args.work, os.path.join(self.args.models, model), port or self.next_port(), env=env, **kw)
        with self.lock:
            self.servers.append(s)
        return s

    def module(self, name, **params):
        """Runs plugins/modules/NAME.py with params; returns its JSON result (with `_seconds`)."""
        path = os.path.join(self.args.work, "args-%s-%d-%d.json" % (name, threading.get_ident(), int(time.time() * 1e6)))
        with open(path, "w") as f:
            json.dump({"ANSIBLE_MODULE_ARGS": params}, f)
        env = dict(os.environ, PYTHONPATH=self.collections + os.pathsep + os.environ.get("PYTHONPATH", ""))
        t0 = time.monotonic()
        p = subprocess.run([sys.executable, os.path.join(self.args.root, "plugins", "modules", name + ".py"), path],
                           env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True, check=False)
        seconds = round(time.monotonic() - t0, 3)
        try:
            out = json.loads(p.stdout.strip().splitlines()[-1])
        except (ValueError, IndexError):
            out = {"failed": True, "msg": "no JSON: rc %d, %s %s" % (p.returncode, p.stdout[-500:], p.stderr[-500:])}
        out["_seconds"] = seconds
        return out

    def gate(self, s, host="127.0.0.1"):
        """The unit's readiness gate (roles/systemd_unit/files/inferops-sglang-ready) started as ExecStartPost is,
        beside the server (MAINPID; the server's API key in its environment, as the unit's environment file has it)."""
        env = dict(os.environ, MAINPID=str(s.pid))
        if "--api-key" in s.argv:
            env["INFEROPS_API_KEY"] = s.argv[s.argv.index("--api-key") + 1]
        script = os.path.join(self.args.root, "roles", "systemd_unit", "files", "inferops-sglang-ready")
        return subprocess.Popen([sys.executable, script, host, str(s.port)], env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, universal_newlines=True)


def ready(s, timeout=400, key=None):
    deadline = CLOCK.now() + timeout
    while CLOCK.now() < deadline and s.exited() is None:
        if s.http("/health", key=key, timeout=3)["status"] == 200:
            return s.since()
        time.sleep(0.1)
    raise AssertionError("%s not ready (rc %s): %s" % (s.name, s.exited(), s.log()[-1500:]))


def gate_passes(suite, s, host, out):
    """The gate beside a ready server exits 0 within a few seconds."""
    t0 = CLOCK.now()
    g = suite.gate(s, host)
    stdout, stderr = g.communicate(timeout=60)
    out.update(rc=g.returncode, seconds=round(CLOCK.now() - t0, 3), stdout=stdout[-500:], stderr=stderr[-500:])
    assert g.returncode == 0, out


# --- the checks -----------------------------------------------------------------------------------
def check_shared(suite, out):
    """Two servers: `launch_server` behind --api-key, `sglang serve --host ::` (IPv6 only). sglang_discover finds
    each one's exact tree, where it answers ([::1] for the second), its capture's argv, and no secret; process_count;
    model_wait behind the key with a generation; the unit's readiness gate beside each (::1 for the second);
    process_kill in mixed mode (the drain, then the server's own exit) and gpu_release (memory back)."""
    a = suite.server("discover_module", args=["--api-key", KEY])
    b = suite.server("discover_serve", launcher=console_script(os.path.join(suite.args.work, "bin")), host="::")
    out["ready_s"] = {"keyed": ready(a, key=KEY), "serve_ipv6": ready(b)}
    for s, url in ((a, "http://127.0.0.1:%d" % a.port), (b, "http://[::1]:%d" % b.port)):
        r = suite.module("sglang_discover", port=s.port)
        out[s.name] = r
        assert not r.get("failed"), r
        family = {p["pid"] for p in r["family"]}
        real = set(s.tree())
        assert family == real, "family %s, the real tree %s" % (sorted(family), sorted(real))
        assert r["url"] == url and r["model"], r
        assert KEY not in json.dumps(r), "the API key is in the result"
        assert r["stored"] == {}, "no capture_path: nothing secret comes back"
        argv = r["capture"]["argv"]
        masked = [x if x != KEY else argv[argv.index("--api-key") + 1] for x in s.argv]
        # a console script's argv: the interpreter first, as the kernel ran its shebang
        assert argv[len(argv) - len(masked):] == masked and ("serve" in argv) == (s is b), argv
    r = suite.module("process_count", pattern=r"sglang\.launch_server .*--port %d( |$)" % a.port, expect=1, timeout=5)
    out["process_count"] = r
    assert not r.get("failed") and r["count"] == 1, r
    r = suite.module("model_wait", url="http://127.0.0.1:%d" % a.port, pid=a.pid, api_key=KEY, generate=True, timeout=60)
    out["model_wait_behind_api_key"] = r
    assert not r.get("failed") and r["generated_tokens"] >= 1, r
    assert KEY not in json.dumps(r)
    r = suite.module("model_wait", url="http://[::1]:%d" % b.port, pid=b.pid, generate=True, timeout=60)
    out["model_wait_ipv6"] = r
    assert not r.get("failed"), r
    out["gate_behind_api_key"], out["gate_ipv6"] = {}, {}
    gate_passes(suite, a, "127.0.0.1", out["gate_behind_api_key"])
    gate_passes(suite, b, "::1", out["gate_ipv6"])
    # process_kill in mixed mode and gpu_release, on the `sglang serve` server
    family = sorted(b.tree())
    before = suite.gpu.read()
    r = suite.module("process_kill", pid=[b.pid], mode="mixed", grace=60)
    out["process_kill"] = r
    assert not r.get("failed") and not r.get("remaining"), r
    rc = b.exited() if b.exited() is not None else b.wait_exit(CLOCK.now() + 5)[0]
    out["exit_code"] = rc
    assert rc == -9, "0.5.15 ends a drained stop by SIGKILLing itself: %s" % rc
    q = suite.module("gpu_release", state="released", pid=family, timeout=60)
    out["gpu_release"] = q
    assert not q.get("failed"), q
    after = suite.gpu.read()
    if before is not None:
        held = sum(v for p, v in before["apps"].items() if p in family and isinstance(v, int))
        out.update(held_mib=held, memory_used_before=before["memory_used_mib"], memory_used_after=after["memory_used_mib"],
                   apps_after=after["apps"])
        assert held > 0 and not set(after["apps"]) & set(family), (before, after)


def check_model_wait_lag(suite, out):
    """model_wait's return against a 50 ms poller of /health on the same fresh server."""
    s = suite.server("wait_lag")
    first = {}

    def poll():
        while "t" not in first and s.exited() is None:
            if s.http("/health", timeout=3)["status"] == 200:
                first["t"] = CLOCK.now()
            time.sleep(0.05)
    th = threading.Thread(target=poll, daemon=True)
    th.start()
    r = suite.module("model_wait", url="http://127.0.0.1:%d" % s.port, pid=s.pid, timeout=600)
    returned = CLOCK.now()
    th.join(10)
    out["result"], out["poller_first_200"], out["module_returned"] = r, first.get("t"), returned
    assert not r.get("failed"), r
    out["lag_s"] = round(returned - first["t"], 3)
    assert out["lag_s"] < 5.0, out["lag_s"]  # a wait that polled every few seconds, or timed out, would not


def check_model_wait_empty_generation(suite, out):
    """A model whose first token ends the sequence answers 200 with empty text: model_wait must pass it (before the
    fix it failed with "answered a test generation with 200 and no text")."""
    s = suite.server("wait_empty", model="tiny-eos")
    ready(s)
    r = suite.module("model_wait", url="http://127.0.0.1:%d" % s.port, pid=s.pid, generate=True, timeout=60)
    out["result"] = r
    assert not r.get("failed"), r
    assert r["generated"] == "" and r["generated_tokens"] >= 1, r


def check_model_wait_scheduler_lost(suite, out):
    """model_wait fails fast when the scheduler is SIGKILLed while loading, and once ready."""
    results = {}

    def loading():
        # the double loads in under a second: made to load for 30 s, as a real server does (ignored by it)
        s = suite.server("wait_lost_loading", extra_env={"SGLANG_DOUBLE_LOAD_SECONDS": "30"})
        result = {}
        th = threading.Thread(target=lambda: result.update(suite.module(
            "model_wait", url="http://127.0.0.1:%d" % s.port, pid=s.pid, timeout=600)), daemon=True)
        th.start()
        sched = find_child(s, "sglang::scheduler", CLOCK.now() + 300)
        assert sched, "no scheduler"
        time.sleep(3)
        assert s.http("/health", timeout=3)["status"] != 200, "ready before the kill: not a loss while loading"
        t_kill = CLOCK.now()
        os.kill(sched, signal.SIGKILL)
        th.join(120)
        rc, t_exit = s.wait_exit(CLOCK.now() + 30)
        results["loading"] = dict(result, failed_after_kill_s=round(CLOCK.now() - t_kill, 3), server_rc=rc,
                                  server_exit_after_kill_s=round(t_exit - t_kill, 3) if t_exit else None)
        assert result.get("failed"), result

    def once_ready():
        t = suite.server("wait_lost_ready")
        ready(t)
        sched = find_child(t, "sglang::scheduler", CLOCK.now() + 5)
        os.kill(sched, signal.SIGKILL)
        t_kill = CLOCK.now()
        r = suite.module("model_wait", url="http://127.0.0.1:%d" % t.port, pid=t.pid, timeout=120)
        rc, t_exit = t.wait_exit(CLOCK.now() + 30)
        results["ready"] = dict(r, failed_after_kill_s=round(CLOCK.now() - t_kill, 3), server_rc=rc,
                                server_exit_after_kill_s=round(t_exit - t_kill, 3) if t_exit else None)
        assert r.get("failed"), r

    errors = run_all({"loading": loading, "ready": once_ready})
    out.update(results)
    assert not errors, errors


# Another program on the port: 404 to everything (what the trace's real server talked to). argv: port
HOLDER = """
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
class NotFound(BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(404)
        self.send_header("Content-Length", "0")
        self.end_headers()
    do_POST = do_GET
    def log_message(self, *args):
        pass
ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), NotFound).serve_forever()
"""


def own_cgroup(pid):
    """Moves pid into a cgroup of its own (below the root of the unified hierarchy, or of systemd's named one on a
    hybrid host): what another program's unit would be. The gate tells the unit's processes by their cgroup; on a
    machine without systemd every process shares one. Returns why not, or None."""
    for mount in ("/sys/fs/cgroup/unified", "/sys/fs/cgroup/systemd", "/sys/fs/cgroup"):
        if os.path.exists(os.path.join(mount, "cgroup.procs")):
            folder = os.path.join(mount, "inferops-holder-%d" % pid)
            try:
                os.makedirs(folder, exist_ok=True)
                with open(os.path.join(folder, "cgroup.procs"), "w") as f:
                    f.write(str(pid))
                return None
            except OSError as e:
                return "%s: %s" % (folder, e)
    return "no cgroup hierarchy found"


def check_port_taken(suite, out):
    """Another program holds the port: the real server loads, fails to bind, and lives on (its warm-up asks the
    holder). Once its bind failed, model_wait (its pid) and the unit's gate beside it (the holder in a cgroup of its
    own) fail at once naming the holder, instead of waiting out their timeouts."""
    port = suite.next_port()
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(port)], stdin=subprocess.DEVNULL)
    try:
        deadline = CLOCK.now() + 10
        while CLOCK.now() < deadline and not port_open("127.0.0.1", port):
            time.sleep(0.05)
        s = suite.server("port_taken", port=port)
        deadline = CLOCK.now() + 400
        while CLOCK.now() < deadline and s.exited() is None and not s.log_lines(r"Errno 98|address already in use"):
            time.sleep(0.2)
        out["bind_failed_s"] = s.since()
        assert s.log_lines(r"Errno 98|address already in use"), s.log()[-1500:]
        t0 = CLOCK.now()
        r = suite.module("model_wait", url="http://127.0.0.1:%d" % port, pid=s.pid, timeout=120)
        out["model_wait"], out["model_wait_failed_after_s"] = r, round(CLOCK.now() - t0, 3)
        assert r.get("failed") and r["msg"].startswith("port %d is held by pid %d" % (port, holder.pid)), r
        assert out["model_wait_failed_after_s"] < 10, out
        out["holder_cgroup"] = own_cgroup(holder.pid)
        if out["holder_cgroup"] is None:
            t0 = CLOCK.now()
            g = suite.gate(s)
            stdout, stderr = g.communicate(timeout=120)
            out["gate"] = dict(rc=g.returncode, seconds=round(CLOCK.now() - t0, 3), stderr=stderr[-500:])
            assert g.returncode == 1 and "port %d is held by pid %d" % (port, holder.pid) in stderr, out["gate"]
            assert out["gate"]["seconds"] < 10, out["gate"]
        out["server_alive_after"] = s.exited() is None
    finally:
        holder.kill()
        holder.wait()


def check_sglang_patch(suite, out):
    """A patch applied to the installed 0.5.15 tree (a copy of the package and its metadata in a venv: the module
    patches only what a venv holds), then a second run that changes nothing."""
    import difflib  # pylint: disable=import-outside-toplevel
    import sglang  # pylint: disable=import-outside-toplevel

    venv = os.path.join(suite.args.work, "patch-venv")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", venv], check=True)
    site = glob.glob(os.path.join(venv, "lib", "python3*", "site-packages"))[0]
    package = os.path.dirname(sglang.__file__)
    shutil.copytree(package, os.path.join(site, "sglang"), ignore=shutil.ignore_patterns("__pycache__"))
    dists = glob.glob(os.path.join(os.path.dirname(package), "sglang-*.dist-info"))
    if dists:
        shutil.copytree(dists[0], os.path.join(site, os.path.basename(dists[0])))
    else:  # the double has none: what pip would write
        meta = os.path.join(site, "sglang-0.5.15.dist-info")
        os.makedirs(meta)
        with open(os.path.join(meta, "METADATA"), "w") as f:
            f.write("Metadata-Version: 2.1\nName: sglang\nVersion: 0.5.15\n")
    rel = "sglang/launch_server.py"
    with open(os.path.join(site, rel)) as f:
        old = f.read().splitlines(True)
    new = old[:1] + ["# inferops: a local fix\n"] + old[1:]
    diff = "".join(difflib.unified_diff(old, new, "a/" + rel, "b/" + rel))
    params = dict(python=os.path.join(venv, "bin", "python"), backup_dir=os.path.join(suite.args.work, "patch-backup"),
                  record_path=os.path.join(suite.args.work, "patch.json"),
                  patches=[{"name": "comment", "diff": diff, "versions": ["0.5.15"]}])
    first = suite.module("sglang_patch", **params)
    second = suite.module("sglang_patch", **params)
    out["first"], out["second"] = first, second
    assert first.get("changed") and not first.get("failed") and first.get("version") == "0.5.15", first
    assert not second.get("changed") and not second.get("failed"), second
    with open(os.path.join(site, rel)) as f:
        assert f.read().splitlines(True) == new


def check_bench_serving(suite, out):
    """SGLang's own bench_serving (0.5.15's needs `datasets`) against a real server, the tokenizer passed."""
    s = suite.server("bench")
    ready(s)
    result = os.path.join(suite.args.work, "bench.jsonl")
    p = subprocess.run([sys.executable, "-m", "sglang.bench_serving", "--backend", "sglang", "--host", "127.0.0.1",
                        "--port", str(s.port), "--dataset-name", "random-ids", "--random-input-len", "32",
                        "--random-output-len", "16", "--num-prompts", "20", "--max-concurrency", "4",
                        "--tokenizer", os.path.join(suite.args.models, "tiny"), "--output-file", result],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True, check=False)
    out["rc"], out["tail"] = p.returncode, p.stdout[-1500:]
    assert p.returncode == 0, p.stdout[-1500:]
    with open(result) as f:
        row = json.loads(f.read().splitlines()[-1])
    keys = ("completed", "duration", "request_throughput", "output_throughput", "mean_ttft_ms", "mean_tpot_ms")
    out["result"] = {k: row.get(k) for k in keys}
    assert row["completed"] == 20, row


LOOK = """
import json, sys
from ansible_collections.inferops.sglang.plugins.module_utils._switch import preflight
print(json.dumps(preflight.inspect(int(sys.argv[1]), "sglang-rank0", [], rank=0, command=json.loads(sys.argv[2]),
                                   run=lambda argv: (1, "", "no systemd here"))))
"""


def check_rank0_waiting(suite, out):
    """Rank 0 of a 2-node server launched by hand (`--tp 2 --nnodes 2 --node-rank 0`: one GPU on this node) whose
    rank 1 never starts: it hosts the group's store at --dist-init-addr's port and waits there, nothing on --port.
    The preflight of the group's rank 0 (the unit's command the same) finds nothing on the port and refuses, naming
    the process that holds the store's port; the server is left waiting."""
    store = suite.next_port() + 1000
    multi = ["--tp", "2", "--nnodes", "2", "--node-rank", "0", "--dist-init-addr", "127.0.0.1:%d" % store]
    s = suite.server("rank0_waiting", args=multi)
    deadline = CLOCK.now() + 300
    while CLOCK.now() < deadline and s.exited() is None and not listeners(store):
        time.sleep(0.2)
    out["store_listening_s"], out["store_sockets"] = s.since(), listeners(store)
    assert out["store_sockets"], "nothing listens on port %d (rc %s): %s" % (store, s.exited(), s.log()[-1500:])
    holders = socket_owners([x["inode"] for x in out["store_sockets"]])
    out["store_holders"] = {str(pid): cmdline(pid) for pid in holders.values()}
    time.sleep(5)  # it waits: still nothing on --port
    out["port_open"] = port_open("127.0.0.1", s.port)
    out["tree"] = {str(pid): info["cmdline"] for pid, info in s.tree().items()}
    env = dict(os.environ, PYTHONPATH=suite.collections + os.pathsep + os.environ.get("PYTHONPATH", ""))
    look = subprocess.run([sys.executable, "-c", LOOK, str(s.port), json.dumps(s.argv)], env=env, check=False,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True)
    assert look.returncode == 0, look.stderr[-1500:]
    found = out["preflight"] = json.loads(look.stdout)
    assert not out["port_open"] and found["owner"] is None, found
    head = "port %d of --dist-init-addr, where the unit's rank 0 hosts its group's store, is held by pid " % store
    named = set(int(re.match(r"(\d+) \(", p[len(head):]).group(1)) for p in found["problems"] if p.startswith(head))
    assert found["problems"] and named and len(named) == len(found["problems"]), found["problems"]
    assert set(holders.values()) <= named <= set(s.tree()), (named, holders, found["problems"])
    out["alive_after"] = s.exited() is None
    assert out["alive_after"], "the look ended the waiting rank 0: %s" % s.log()[-1500:]


CHECKS = [("shared", check_shared), ("model_wait_lag", check_model_wait_lag),
          ("model_wait_empty_generation", check_model_wait_empty_generation),
          ("model_wait_scheduler_lost", check_model_wait_scheduler_lost), ("port_taken", check_port_taken),
          ("sglang_patch", check_sglang_patch), ("bench_serving", check_bench_serving),
          ("rank0_waiting", check_rank0_waiting)]


def run_all(fns):
    """Runs each fn in a thread of its own, side by side; {name: traceback} of those that raised."""
    errors = {}

    def body(name, fn):
        try:
            fn()
        except Exception:  # pylint: disable=broad-except
            errors[name] = traceback.format_exc()[-3000:]
    threads = [threading.Thread(target=body, args=item, daemon=True) for item in fns.items()]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return errors


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for a in ("--models", "--work", "--out", "--root"):
        ap.add_argument(a, required=True)
    ap.add_argument("--only", default="")
    args = ap.parse_args()
    os.makedirs(args.work, exist_ok=True)
    os.makedirs(args.out, exist_ok=True)
    suite = Suite(args)
    suite.gpu.start()
    only = set(filter(None, args.only.split(",")))
    saving = threading.Lock()

    def save():
        with saving, open(os.path.join(args.out, "modules.json"), "w") as f:
            json.dump(suite.results, f, indent=1, sort_keys=True, default=str)

    def check(name, fn):
        out = {"started_s": CLOCK.now()}
        suite.results["checks"][name] = out
        try:
            fn(suite, out)
            out["ok"] = True
        except Exception:  # pylint: disable=broad-except
            out["ok"], out["error"] = False, traceback.format_exc()[-3000:]
        out["seconds"] = round(CLOCK.now() - out["started_s"], 3)
        print("%-30s %s %.1f s" % (name, "ok" if out["ok"] else "FAILED", out["seconds"]), flush=True)
        save()

    run_all({name: (lambda n=name, f=fn: check(n, f)) for name, fn in CHECKS if not only or name in only})
    for s in suite.servers:
        s.kill_all()
    suite.gpu.stopped.set()
    suite.results["logs"] = {s.name: s.log()[-4000:] for s in suite.servers}
    save()
    shutil.rmtree(os.path.join(args.work, "collections"), ignore_errors=True)
    failed = [n for n, c in suite.results["checks"].items() if not c["ok"]]
    print("%d passed, %d failed" % (len(suite.results["checks"]) - len(failed), len(failed)))
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
