"""Makes the collection importable as ansible_collections.inferops.sglang, spawns real processes, copies the tree."""
import atexit
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest

# the tests import free_port and wait_for from here
from tests.helpers import free_port, wait_for  # noqa: F401  pylint: disable=unused-import

ROOT = Path(__file__).resolve().parents[2]
_tree = Path(tempfile.mkdtemp(prefix="inferops-unit-"))
atexit.register(shutil.rmtree, str(_tree), True)  # the tree holds only a link to ROOT, which rmtree does not follow
(_tree / "ansible_collections" / "inferops").mkdir(parents=True)
(_tree / "ansible_collections" / "inferops" / "sglang").symlink_to(ROOT)
COLLECTIONS = str(_tree)
sys.path.insert(0, COLLECTIONS)


class Spawner:
    """Starts real processes from small Python programs and cleans up everything they leave."""

    def __init__(self, tmp_path):
        self.tmp = tmp_path
        self.marker = "inferops-test-%d-%s" % (os.getpid(), tmp_path.name)
        self.procs = []

    def python(self, code, *args, argv0=None, new_session=False, **kw):
        """Run `python -c code marker args...`; the marker in argv makes leftovers findable."""
        script = self.tmp / ("p%d.py" % len(self.procs))
        script.write_text(textwrap.dedent(code))
        cmd = [sys.executable, str(script), self.marker, *args]
        p = subprocess.Popen(cmd, executable=sys.executable, start_new_session=new_session,
                             stdin=subprocess.DEVNULL, **kw)
        if argv0:
            p.args = cmd
        self.procs.append(p)
        return p

    def cleanup(self):
        from ansible_collections.inferops.sglang.plugins.module_utils._host import procfs as _procfs
        sessions = set(p.pid for p in self.procs)  # those started in a session of their own lead it
        for p in self.procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        for proc in _procfs.snapshot().values():
            if self.marker in proc.cmdline or proc.sid in sessions or \
                    str(self.tmp) in " ".join(_procfs.open_files(proc.pid).values()):
                try:
                    os.kill(proc.pid, signal.SIGKILL)
                except OSError:
                    pass


@pytest.fixture
def spawn(tmp_path):
    s = Spawner(tmp_path)
    yield s
    s.cleanup()


class Cgroups:
    """Real cgroups in the hierarchy systemd tracks units in (the name=systemd one on a hybrid host, else the
    unified one), made for one test below a slice of its own (inferops-test-PID-N.slice) and removed after it:
    path(*parts) is the cgroup's path as /proc/PID/cgroup shows it, enter(*parts) a preexec_fn that starts a process
    there (its children follow it)."""

    def __init__(self, tmp_path):
        self.mount, self.made = self._mount(), []
        self.home = self.of(os.getpid())
        self.slice = "/inferops-test-%d-%s.slice" % (os.getpid(), tmp_path.name.replace("_", "-"))

    @staticmethod
    def of(pid):
        """The process's path in that hierarchy, read here (not by the code under test)."""
        with open("/proc/%d/cgroup" % pid) as f:
            lines = [line.rstrip("\n").split(":", 2) for line in f]
        paths = [p for n, c, p in lines if "name=systemd" in c.split(",")] + [p for n, c, p in lines if n == "0"]
        return paths[0]

    @staticmethod
    def _mount():
        """Where the hierarchy is mounted, when its root is this namespace's (else None)."""
        found = {}
        with open("/proc/self/mountinfo") as f:
            for line in f:
                left, dummy, right = line.partition(" - ")
                fields, kind = left.split(), right.split()
                if kind[0] == "cgroup" and "name=systemd" in kind[2].split(",") and fields[3] == "/":
                    found["systemd"] = fields[4]
                elif kind[0] == "cgroup2" and fields[3] == "/":
                    found.setdefault("unified", fields[4])
        return found.get("systemd", found.get("unified"))

    def path(self, *parts):
        return "/".join((self.slice,) + parts)

    def enter(self, *parts):
        if self.mount is None or os.geteuid() != 0:
            pytest.skip("no cgroup hierarchy this user can make cgroups in")
        folder = self.mount + self.path(*parts)
        if folder not in self.made:
            os.makedirs(folder, exist_ok=True)
            self.made.append(folder)

        def move():
            with open(folder + "/cgroup.procs", "w") as f:
                f.write("0")  # this process
        return move

    def cleanup(self):
        for folder in sorted(self.made, key=len, reverse=True):
            try:
                with open(folder + "/cgroup.procs") as f:
                    pids = f.read().split()
            except OSError:
                pids = []
            for pid in pids:
                try:
                    with open(self.mount + self.home + "/cgroup.procs", "w") as f:
                        f.write(pid)
                except OSError:
                    pass
        for folder in sorted(set(os.path.dirname(f) for f in self.made) | set(self.made), key=len, reverse=True):
            while folder.startswith(self.mount + self.slice):
                try:
                    os.rmdir(folder)
                except OSError:
                    break
                folder = os.path.dirname(folder)


@pytest.fixture
def cgroups(tmp_path):
    c = Cgroups(tmp_path)
    yield c
    c.cleanup()


# An HTTP server that answers 200 to every request and logs each one's path and Authorization header, one JSON object
# a line: what another local user could bind on a server's port while its model loads.
IMPOSTOR = r"""
import json, sys
from http.server import BaseHTTPRequestHandler, HTTPServer
host, port, log = sys.argv[1], int(sys.argv[2]), sys.argv[3]
class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_GET(self):
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        with open(log, "a") as f:
            f.write(json.dumps({"path": self.path, "authorization": self.headers.get("Authorization")}) + "\n")
        body = json.dumps({"object": "list", "data": [{"id": "impostor"}], "text": "OK"}).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    do_POST = do_GET
    def log_message(self, *args):
        pass
HTTPServer((host, port), Handler).serve_forever()
"""


class Impostor:
    """impostor.start(port, host) -> Popen: IMPOSTOR run as nobody by the system's python3, in a cgroup of its own
    (cgroups.enter("impostor.service")); requests() is what it was asked."""

    def __init__(self, spawn, cgroups):
        self.spawn, self.cgroups = spawn, cgroups
        self.folder = tempfile.mkdtemp(prefix="inferops-impostor-")
        os.chmod(self.folder, 0o777)
        self.log = os.path.join(self.folder, "requests.jsonl")

    def start(self, port, host="127.0.0.1"):
        enter = self.cgroups.enter("impostor.service")

        def become():
            enter()
            os.setgid(65534)
            os.setuid(65534)
        p = subprocess.Popen(["/usr/bin/python3", "-c", IMPOSTOR, host, str(port), self.log, self.spawn.marker],
                             preexec_fn=become, stdin=subprocess.DEVNULL)
        self.spawn.procs.append(p)
        wait_for(lambda: _listening(host, port), 10)
        return p

    def requests(self):
        if not os.path.exists(self.log):
            return []
        with open(self.log) as f:
            return [json.loads(line) for line in f]


def _listening(host, port):
    try:
        socket.create_connection((host, port), timeout=1).close()
        return True
    except OSError:
        return False


@pytest.fixture
def impostor(spawn, cgroups):
    imp = Impostor(spawn, cgroups)
    yield imp
    shutil.rmtree(imp.folder, ignore_errors=True)


def copy_of_the_tree(dest):
    """The tree as git has it (tracked, and untracked not ignored: no venv, no cache), at
    dest/ansible_collections/inferops/sglang, a git repository of its own."""
    tree = dest / "ansible_collections" / "inferops" / "sglang"
    names = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=str(ROOT),
                           stdout=subprocess.PIPE, check=True).stdout.decode().split("\0")
    for name in (n for n in names if n and (ROOT / n).is_file()):
        (tree / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(str(ROOT / name), str(tree / name))
    subprocess.run(["git", "init", "-q"], cwd=str(tree), check=True)
    subprocess.run(["git", "add", "-A"], cwd=str(tree), check=True)
    return tree
