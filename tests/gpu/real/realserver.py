"""What the GPU suites share: a real SGLang server started as operators start one, and the readings taken of it
(HTTP over loopback, the process tree from /proc, GPU memory from nvidia-smi), every time on one clock: seconds
since the suite began (CLOCK.now()). Standard library only; the same code drives the SGLang double on a CPU.
"""
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request


class Clock:
    def __init__(self):
        self.t0 = time.monotonic()

    def now(self):
        return round(time.monotonic() - self.t0, 3)


CLOCK = Clock()
# the flags every server here takes: tp 1, the triton attention backend, no CUDA graphs, a small KV cache (so that
# several servers share the one GPU: --mem-fraction-static only sizes the profile, --max-total-tokens the pool)
COMMON = ["--tp", "1", "--attention-backend", "triton", "--sampling-backend", "pytorch", "--disable-cuda-graph",
          "--mem-fraction-static", "0.3", "--max-total-tokens", "32768"]


def console_script(bindir, name="sglang", module="sglang.cli.main"):
    """The script pip writes for `sglang = sglang.cli.main:main` (the bundle is installed without bin/)."""
    os.makedirs(bindir, exist_ok=True)
    path = os.path.join(bindir, name)
    with open(path, "w") as f:
        f.write("#!%s\nimport re\nimport sys\nfrom %s import main\nif __name__ == '__main__':\n"
                "    sys.argv[0] = re.sub(r'(-script\\.pyw|\\.exe)?$', '', sys.argv[0])\n"
                "    sys.exit(main())\n" % (sys.executable, module))
    os.chmod(path, 0o755)
    return path


class Server:
    """A real server (or the double) started detached, in a session of its own, as `setsid nohup ... &` does.
    launcher: "module" (python3 -m sglang.launch_server) or the path of an `sglang` console script (sglang serve)."""

    def __init__(self, name, workdir, model, port, args=(), host="127.0.0.1", launcher="module", env=None):
        self.name, self.port, self.host = name, port, host
        self.log_path = os.path.join(workdir, "%s.log" % name)
        head = [sys.executable, "-m", "sglang.launch_server"] if launcher == "module" else [launcher, "serve"]
        self.argv = head + ["--model-path", model, "--host", host, "--port", str(port)] + COMMON + list(args)
        self.started = CLOCK.now()
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(self.argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                         start_new_session=True, env=env)
        self.pid = self.proc.pid
        self.known = {self.pid}  # every pid seen in its tree, for the leftovers check and the clean-up

    # --- its life ------------------------------------------------------------------------
    def since(self):
        return round(CLOCK.now() - self.started, 3)

    def exited(self):
        """The main process's return code (negative: the signal), or None while it runs."""
        return self.proc.poll()

    def signal(self, sig):
        try:
            os.kill(self.pid, sig)
        except ProcessLookupError:
            pass

    def wait_exit(self, until):
        """Waits until the main process is gone or CLOCK reaches until; returns (rc, CLOCK time) or (None, None)."""
        while CLOCK.now() < until:
            rc = self.proc.poll()
            if rc is not None:
                return rc, CLOCK.now()
            time.sleep(0.02)
        return None, None

    def tree(self):
        t = tree(self.pid)
        self.known.update(t)
        return t

    def leftovers(self):
        """Pids of its tree (as seen so far) still alive, with their titles."""
        return {pid: cmdline(pid) for pid in sorted(self.known) if alive(pid)}

    def kill_all(self):
        for pid in list(self.known) + list(tree(self.pid)):
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            pass

    def log(self):
        with open(self.log_path, errors="replace") as f:
            return f.read()

    def log_lines(self, pattern):
        return [line for line in self.log().splitlines() if re.search(pattern, line)]

    # --- HTTP ----------------------------------------------------------------------------
    def url(self, path, host=None):
        host = host or {"0.0.0.0": "127.0.0.1", "::": "::1"}.get(self.host, self.host)  # `--host ::`: IPv6 only
        return "http://%s:%d%s" % ("[%s]" % host if ":" in host else host, self.port, path)

    def http(self, path, method="GET", key=None, body=None, timeout=5.0, host=None):
        return http(self.url(path, host), method, key, body, timeout)

    def port_open(self, host="127.0.0.1"):
        return port_open(host, self.port)


def http(url, method="GET", key=None, body=None, timeout=5.0):
    """{"status": code (0: refused, -1: no answer in time), "body": text, "t": CLOCK, "s": seconds taken}."""
    headers = {"Authorization": "Bearer " + key} if key else {}
    data = None
    if body is not None:
        data = json.dumps(body).encode()
        headers["Content-Type"] = "application/json"
    req = urllib.request.Request(url, data=data, method=method, headers=headers)
    t = CLOCK.now()
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            status, text = r.status, r.read().decode(errors="replace")
    except urllib.error.HTTPError as e:
        status, text = e.code, e.read().decode(errors="replace")
    except (urllib.error.URLError, OSError) as e:
        reason = getattr(e, "reason", e)
        status = 0 if isinstance(reason, ConnectionRefusedError) else -1
        text = repr(reason)
    return {"status": status, "body": text, "t": t, "s": round(CLOCK.now() - t, 3)}


def port_open(host, port):
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.settimeout(1.0)
        return s.connect_ex((host, port)) == 0


def listeners(port):
    """The listening sockets on port from /proc/net/tcp and tcp6: [(family, address, inode)]."""
    found = []
    for fam in ("tcp", "tcp6"):
        try:
            with open("/proc/net/" + fam) as f:
                rows = f.read().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            cols = row.split()
            addr, hexport = cols[1].rsplit(":", 1)
            if int(hexport, 16) == port and cols[3] == "0A":  # LISTEN
                found.append({"family": fam, "address": addr, "inode": int(cols[9])})
    return found


def socket_owners(inodes):
    """{inode: pid} for the given socket inodes, from /proc/PID/fd."""
    want = {"socket:[%d]" % i: i for i in inodes}
    owners = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            for fd in os.listdir("/proc/%s/fd" % d):
                target = os.readlink("/proc/%s/fd/%s" % (d, fd))
                if target in want:
                    owners[want[target]] = int(d)
        except OSError:
            continue
    return owners


# --- /proc ----------------------------------------------------------------------------------
def stat(pid):
    with open("/proc/%d/stat" % pid) as f:
        text = f.read()
    fields = text[text.rindex(")") + 2:].split()
    return {"state": fields[0], "ppid": int(fields[1]), "pgid": int(fields[2]), "sid": int(fields[3])}


def cmdline(pid):
    try:
        with open("/proc/%d/cmdline" % pid, "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return None


def comm(pid):
    try:
        with open("/proc/%d/comm" % pid) as f:
            return f.read().strip()
    except OSError:
        return None


def alive(pid):
    try:
        return stat(pid)["state"] != "Z"
    except OSError:
        return False


def tree(root):
    """{pid: {ppid, pgid, sid, state, cmdline, comm}} of root and every process below it."""
    kids = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                kids.setdefault(stat(int(d))["ppid"], []).append(int(d))
            except (OSError, ValueError):
                continue
    out, todo = {}, [root]
    while todo:
        pid = todo.pop()
        try:
            info = stat(pid)
        except OSError:
            continue
        info.update(cmdline=cmdline(pid), comm=comm(pid))
        out[pid] = info
        todo.extend(kids.get(pid, []))
    return out


def find_child(server, prefix, timeout_at):
    """The pid of the first process below the server whose command line starts with prefix, or None."""
    while CLOCK.now() < timeout_at and server.exited() is None:
        for pid, info in server.tree().items():
            if pid != server.pid and (info["cmdline"] or "").startswith(prefix):
                return pid
        time.sleep(0.05)
    return None


# --- the GPU --------------------------------------------------------------------------------
class GpuSampler(threading.Thread):
    """nvidia-smi every `every` s: memory.used and the compute apps (pid, used MiB). Nothing without nvidia-smi."""

    def __init__(self, every=1.0):
        super().__init__(daemon=True)
        self.every, self.samples, self.stopped = every, [], threading.Event()
        self.smi = shutil.which("nvidia-smi")

    def read(self):
        if not self.smi:
            return None
        t = CLOCK.now()
        apps = subprocess.run([self.smi, "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"],
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, universal_newlines=True,
                              check=False).stdout
        used = subprocess.run([self.smi, "--query-gpu=memory.used", "--format=csv,noheader,nounits"],
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, universal_newlines=True,
                              check=False).stdout
        procs = {}
        for line in apps.splitlines():
            bits = [b.strip() for b in line.split(",")]
            if len(bits) == 2 and bits[0].isdigit():
                procs[int(bits[0])] = int(bits[1]) if bits[1].isdigit() else bits[1]
        return {"t": t, "memory_used_mib": sum(int(x) for x in used.split() if x.isdigit()), "apps": procs}

    def run(self):
        while not self.stopped.is_set():
            s = self.read()
            if s is not None:
                self.samples.append(s)
            self.stopped.wait(self.every)

    def of(self, pids, since=None, until=None):
        """[(t, MiB of those pids)] from the samples in [since, until]."""
        out = []
        for s in self.samples:
            if (since is None or s["t"] >= since) and (until is None or s["t"] <= until):
                out.append((s["t"], sum(v for p, v in s["apps"].items() if p in pids and isinstance(v, int))))
        return out
