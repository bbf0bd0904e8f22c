"""What listens on a port, and whether it is the server waited for."""
import os
import shlex
import socket
import subprocess
import sys

import pytest

from ansible_collections.inferops.sglang.plugins.module_utils._host import procfs as _procfs
from ansible_collections.inferops.sglang.plugins.module_utils._server import family as _family, listeners as _listeners
from tests.unit.conftest import free_port, wait_for
from ..conftest import DOUBLE, server_cmd, wait_listening


def test_nothing_listens():
    assert _listeners.listeners(free_port(), _procfs.snapshot()) == []


@pytest.mark.parametrize("bind,url", [("0.0.0.0", "http://127.0.0.1:%d"), ("127.0.0.1", "http://127.0.0.1:%d"),
                                      ("::1", "http://[::1]:%d"), ("::", "http://[::1]:%d")])
def test_local_url_of_a_listener(spawn, bind, url):
    port = free_port()
    spawn.python("import http.server, socket, sys\n"
                 "class S(http.server.HTTPServer):\n    address_family = socket.AF_INET6 if ':' in %r else socket.AF_INET\n"
                 "S((%r, %d), http.server.BaseHTTPRequestHandler).serve_forever()" % (bind, bind, port))
    wait_listening(port)
    assert _listeners.local_url(port) == url % port
    assert _listeners.connections(port) == 0
    with socket.create_connection(("::1" if ":" in bind else "127.0.0.1", port)):
        assert wait_for(lambda: _listeners.connections(port) == 1, 5)
    assert _listeners.local_url(free_port()) is None


def test_listener_is_the_servers_own(shell, spawn):
    port = free_port()
    shell("%s > s.log 2>&1 & wait" % server_cmd(port))
    (server,) = wait_listening(port)
    assert _listeners.listener_problem(port, pid=server) is None
    other = spawn.python("import time; time.sleep(600)")
    why = _listeners.listener_problem(port, pid=other.pid)
    assert why and "port %d is held by pid %d" % (port, server) in why and "pid %d's family" % other.pid in why
    assert "nothing that can be read listens" in _listeners.listener_problem(free_port(), pid=server)


def test_a_users_own_unit_named_like_the_service_is_not_the_service(spawn, cgroups, tmp_path):
    """A user with a manager of their own runs `.../user@1000.service/app.slice/sglang-T.service`: its listener and
    its schedulers are not the system's sglang-T.service (its last component is only a name)."""
    unit = "sglang-t%d.service" % os.getpid()
    spoof = cgroups.enter("user-1000.slice", "user@1000.service", "app.slice", unit)
    real = cgroups.enter(unit)
    ports = {}
    for name, where in (("spoof", spoof), ("real", real)):
        ports[name] = free_port()
        env = dict(os.environ, PYTHONPATH=DOUBLE, SGLANG_DOUBLE_LOAD_SECONDS="0.3", SGLANG_DOUBLE_WARMUP_SECONDS="0.1")
        spawn.procs.append(subprocess.Popen(shlex.split(server_cmd(ports[name])), env=env, preexec_fn=where,
                                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
    (fake,) = wait_listening(ports["spoof"])
    (mine,) = wait_listening(ports["real"])
    assert cgroups.of(fake).endswith("/user@1000.service/app.slice/" + unit)
    assert _procfs.unit_of(fake) == "user@1000.service" and _procfs.unit_of(mine) == unit
    assert _listeners.listener_problem(ports["real"], unit=unit) is None
    why = _listeners.listener_problem(ports["spoof"], unit=unit)
    assert why and "port %d is held by pid %d" % (ports["spoof"], fake) in why and "not by %s" % unit in why
    watch = _family.SchedulerWatch(unit=unit)
    members = wait_for(lambda: watch.members() if len(watch.members()) == 2 else None, 10)
    assert all(mine in _procfs.ancestors(p.pid) for p in members), "the spoof's schedulers are not the unit's"


@pytest.mark.parametrize("host, ask", [("127.0.0.1", "127.0.0.1"), ("::", "::1")])
def test_a_squatter_is_named_and_the_servers_own_listener_is_not(shell, spawn, impostor, host, ask):
    """What the waits fail fast on: a connection to the port accepted by another process (here: nobody's, in another
    cgroup). The server's own listener (the double with `--host ::` is IPv6 only, as a real 0.5.15's uvicorn) is no
    squatter, nor is a closed port."""
    port = free_port()
    shell("%s --host %s > s.log 2>&1 & wait" % (server_cmd(port), host))
    (server,) = wait_listening(port)
    assert _listeners.local_url(port) == ("http://[::1]:%d" % port if ":" in host else "http://127.0.0.1:%d" % port)
    assert _listeners.squatter(ask, port, pid=server) is None
    assert _listeners.listener_problem(port, pid=server) is None
    other = spawn.python("import time; time.sleep(600)")
    why = _listeners.squatter(ask, port, pid=other.pid)
    assert why.startswith("port %d is held by pid %d (%s -m sglang.launch_server" % (port, server, sys.executable))
    assert why.endswith("not by pid %d's family: the server cannot bind it" % other.pid)
    elsewhere = free_port()
    holder = impostor.start(elsewhere)
    assert "port %d is held by pid %d (/usr/bin/python3 -c " % (elsewhere, holder.pid) in _listeners.squatter(
        "127.0.0.1", elsewhere, unit="sglang-%d.service" % elsewhere)
    assert _listeners.squatter(ask, free_port(), pid=server) is None, "nothing listens: still loading"


@pytest.mark.parametrize("look", ["squatter", "peer_problem"])
def test_a_connection_reset_before_any_process_accepted_it_is_no_holder_and_no_error(monkeypatch, look):
    """The server's listener closes (its process ended) after the kernel completed the connection and before any
    process accepted it: the client's socket is reset and has no peer any more (getpeername: ENOTCONN). Nothing holds
    the port then, and the API key is not sent; neither look raises (the switch's wait failed on it: 'Module failed:
    [Errno 107] Transport endpoint is not connected')."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(4)
    port = listener.getsockname()[1]
    connect = socket.create_connection

    def connected_then_reset(address, *args, **kwargs):
        sock = connect(address, *args, **kwargs)
        listener.close()
        assert wait_for(lambda: _no_peer(sock), 5), "the kernel resets a connection nobody accepted"
        return sock

    monkeypatch.setattr(_listeners.socket, "create_connection", connected_then_reset)
    if look == "squatter":
        assert _listeners.squatter("127.0.0.1", port, unit="sglang-%d.service" % port, wait=30) is None
    else:
        sock = _listeners.socket.create_connection(("127.0.0.1", port))
        with sock:
            assert _listeners.peer_problem(sock, unit="sglang-%d.service" % port, wait=30) == (
                "the connection was reset before a process accepted it")


def _no_peer(sock):
    try:
        sock.getpeername()
    except OSError:
        return True
    return False
