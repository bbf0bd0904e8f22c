"""The preflight on real process trees: what listens, and what keeps a switch from beginning."""
import json
import subprocess
import sys

from ansible_collections.inferops.sglang.plugins.module_utils import _discover, _preflight, _procfs

from tests.unit.conftest import COLLECTIONS, free_port, wait_for
from .conftest import Systemctl


def test_preflight_problems(spawn, tmp_path):
    port = free_port()
    other = spawn.python("import http.server, sys; http.server.HTTPServer(('127.0.0.1', %d), "
                         "http.server.BaseHTTPRequestHandler).serve_forever()" % port)
    wait_for(lambda: _discover.listeners(port, _procfs.snapshot()), 10)
    found = _preflight.inspect(port, "sglang", [str(tmp_path / "nvidia*")], run=Systemctl())
    assert found["owner"] == "adhoc"
    assert len(found["problems"]) == 1 and "not an SGLang server" in found["problems"][0]
    assert str(other.pid) in found["problems"][0]
    empty = _preflight.inspect(free_port(), "sglang", run=Systemctl())
    assert empty["owner"] is None and empty["family"] == [] and empty["problems"] == []


LOOK = """
import json, sys
sys.path.insert(0, %r)
from ansible_collections.inferops.sglang.plugins.module_utils import _discover, _procfs, _preflight
procs = _procfs.snapshot()
print(json.dumps(dict(listeners=_discover.listeners(%d, procs), hidden=_discover.hidden_listeners(%d, procs),
                      problems=_preflight.inspect(%d, "sglang", [], procs, run=lambda argv: (0, "0", ""))["problems"])))
"""


def test_a_listener_root_cannot_inspect_is_named_as_such(tmp_path):
    """Another user's server, looked at by a root without CAP_SYS_PTRACE over it (root of a user namespace, as in
    a default podman container): its open files cannot be read, and the port is said to be in use, not free."""
    port = free_port()
    other = subprocess.Popen(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "/usr/bin/python3", "-c",
                              "import socket, time; s = socket.socket(); s.bind(('127.0.0.1', %d)); s.listen(); "
                              "time.sleep(600)" % port], stderr=subprocess.PIPE)
    try:
        wait_for(lambda: _discover.listening_inodes(port), 10)
        look = subprocess.run(["unshare", "--user", "--map-root-user", sys.executable, "-c",
                               LOOK % (COLLECTIONS, port, port, port)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True, check=False)
        assert look.returncode == 0, look.stderr
        seen = json.loads(look.stdout)
        assert seen["listeners"] == []  # it cannot read the server's open files
        (hidden,) = seen["hidden"]
        assert hidden["uid"] == 65534 and other.pid in hidden["unreadable"]
        assert hidden["inode"] == int(list(_discover.listening_inodes(port))[0])
        (problem,) = seen["problems"]
        assert problem.startswith("port %d is in use, by a listening socket that no process this user can inspect "
                                  "holds" % port) and "owned by uid 65534 (nobody)" in problem
        assert "maybe pid " in problem and str(other.pid) in problem
    finally:
        other.kill()
        other.wait()
