"""The preflight on real process trees: what listens, and what keeps a switch from beginning."""
import json
import shlex
import shutil
import subprocess
import sys

from ansible_collections.inferops.sglang.plugins.module_utils._server import listeners as _listeners
from ansible_collections.inferops.sglang.plugins.module_utils._switch import preflight as _preflight
from ansible_collections.inferops.sglang.plugins.module_utils._host import procfs as _procfs

from tests.unit.conftest import COLLECTIONS, free_port, wait_for
from .. import programs
from ..conftest import Systemctl, server_cmd, wait_listening


def test_preflight_problems(spawn, tmp_path):
    port = free_port()
    other = spawn.python("import http.server, sys; http.server.HTTPServer(('127.0.0.1', %d), "
                         "http.server.BaseHTTPRequestHandler).serve_forever()" % port)
    wait_for(lambda: _listeners.listeners(port, _procfs.snapshot()), 10)
    found = _preflight.inspect(port, "sglang", [str(tmp_path / "nvidia*")], run=Systemctl())
    assert found["owner"] == "adhoc"
    assert len(found["problems"]) == 1 and "not an SGLang server" in found["problems"][0]
    assert str(other.pid) in found["problems"][0]
    empty = _preflight.inspect(free_port(), "sglang", run=Systemctl())
    assert empty["owner"] is None and empty["family"] == [] and empty["problems"] == []


def test_each_rank_of_a_multi_node_server_stops_the_switch(two_nodes):
    """Rank 1 (its port answering a dummy health check) and rank 0 of one server over two hosts: neither is switched
    alone; the preflight says which rank of what, before anything is stopped."""
    rank0, rank1 = two_nodes
    (one,) = _preflight.inspect(rank1.port, "sglang", [], run=Systemctl())["problems"]
    assert "is rank 1 of a 2-node SGLang server" in one and "serves no API" in one
    (zero,) = _preflight.inspect(rank0.port, "sglang", [], run=Systemctl())["problems"]
    assert "is rank 0 of a 2-node SGLang server" in zero
    assert rank0.poll() is None and rank1.poll() is None


def test_a_rank_switched_with_its_group_passes_as_that_rank_only(two_nodes):
    """The group's switch tells each host its rank: that rank passes the preflight; a host given another rank does
    not (its inventory names the wrong host), nor a rank given where the server is on one host."""
    rank0, rank1 = two_nodes
    assert _preflight.inspect(rank1.port, "sglang", [], run=Systemctl(), rank=1)["problems"] == []
    found = _preflight.inspect(rank0.port, "sglang", [], run=Systemctl(), rank=0)
    assert found["problems"] == [] and found["owner"] == "adhoc" and found["family"]
    (wrong,) = _preflight.inspect(rank1.port, "sglang", [], run=Systemctl(), rank=0)["problems"]
    assert wrong.endswith("is rank 1 of a 2-node SGLang server (--nnodes 2 --node-rank 1 --dist-init-addr %s), not "
                          "rank 0 as its group has it" % rank1.addr), wrong


def test_a_rank_0_still_waiting_for_its_group_is_named_by_the_port_of_its_store(server):
    """Rank 0 launched by hand and its other rank never started: it listens on --dist-init-addr's port (the group's
    store), not yet on --port, so nothing is on the port. The group's rank 0 is refused, naming what holds the store's
    port (the unit's rank 0 could not take it); rank 1's command, which only connects there, is not."""
    addr = "127.0.0.1:%d" % free_port()
    store = int(addr.rsplit(":", 1)[1])
    rank0 = server("--tp", "2", "--nnodes", "2", "--node-rank", "0", "--dist-init-addr", addr)
    port = int(rank0.url.rsplit(":", 1)[1])
    assert wait_listening(store) == [rank0.pid]
    command = [sys.executable, "-m", "sglang.launch_server", "--port", str(port), "--tp", "2", "--nnodes", "2",
               "--node-rank", "0", "--dist-init-addr", addr]
    found = _preflight.inspect(port, "sglang", [], run=Systemctl(), rank=0, command=command)
    assert found["owner"] is None and found["family"] == []
    (why,) = found["problems"]
    assert why.startswith("port %d of --dist-init-addr, where the unit's rank 0 hosts its group's store, is held by "
                          "pid %d (" % (store, rank0.pid)), why
    assert "sglang.launch_server" in why and "Stop it, or start its other ranks" in why
    rank1 = command[:command.index("--node-rank") + 1] + ["1"] + command[command.index("--node-rank") + 2:]
    assert _preflight.inspect(port, "sglang", [], run=Systemctl(), rank=1, command=rank1)["problems"] == []
    assert _preflight.inspect(port, "sglang", [], run=Systemctl())["problems"] == [], "no command: nothing to take"
    assert rank0.poll() is None and _listeners.listeners(port, _procfs.snapshot()) == []


LOOK = """
import json, sys
sys.path.insert(0, %r)
from ansible_collections.inferops.sglang.plugins.module_utils._server import listeners as _listeners
from ansible_collections.inferops.sglang.plugins.module_utils._host import procfs as _procfs
from ansible_collections.inferops.sglang.plugins.module_utils._switch import preflight as _preflight
procs = _procfs.snapshot()
print(json.dumps(dict(listeners=_listeners.listeners(%d, procs), hidden=_listeners.hidden_listeners(%d, procs),
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
        wait_for(lambda: _listeners.listening_inodes(port), 10)
        look = subprocess.run(["unshare", "--user", "--map-root-user", sys.executable, "-c",
                               LOOK % (COLLECTIONS, port, port, port)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True, check=False)
        assert look.returncode == 0, look.stderr
        seen = json.loads(look.stdout)
        assert seen["listeners"] == []  # it cannot read the server's open files
        (hidden,) = seen["hidden"]
        assert hidden["uid"] == 65534 and other.pid in hidden["unreadable"]
        assert hidden["inode"] == int(list(_listeners.listening_inodes(port))[0])
        (problem,) = seen["problems"]
        assert problem.startswith("port %d is in use, by a listening socket that no process this user can inspect "
                                  "holds" % port) and "owned by uid 65534 (nobody)" in problem
        # the first ten of that user's unreadable pids: the test's own among them unless other processes of nobody
        # run on the machine (hidden["unreadable"] holds it in any case)
        assert "maybe pid %s (" % ", ".join(str(x) for x in hidden["unreadable"][:10]) in problem
    finally:
        other.kill()
        other.wait()


def test_a_member_that_opens_every_gpu_does_not_widen_the_servers_gpus(shell, run, tmp_path):
    """The owner's own code in the family (here an orphan of the server's interpreter with multiprocessing in its
    argv) opens /dev/nvidia0-3: the server's GPUs are still its schedulers' (0 and 1, tp 2), so another tenant's job
    on GPU 3 is no stray of the switch's to release."""
    for n in range(4):
        (tmp_path / ("nvidia%d" % n)).touch()
    port = free_port()
    every = " ".join("%d<nvidia%d" % (3 + n, n) for n in range(4))
    shell("%s > s.log 2>&1 & sleep 0.5; ( exec %s %s -c 'import time; time.sleep(600)' multiprocessing.spawn & ); "
          "wait" % (server_cmd(port), every, shlex.quote(sys.executable)))
    wait_listening(port)
    tenant = run(programs.HOLDER, str(tmp_path / "nvidia3"))[0]

    def looked():
        f = _preflight.inspect(port, "sglang", [str(tmp_path / "nvidia*")], run=Systemctl())
        greedy = [m for m in f["family"] if "multiprocessing.spawn" in m["cmdline"]]
        titled = [m for m in f["family"] if m["cmdline"].startswith("sglang::scheduler")]
        return f if greedy and len(titled) == 2 else None
    found = wait_for(looked, 15)
    assert found["gpus"] == [0, 1] and found["problems"] == []
    assert tenant.pid not in [s["pid"] for s in found["strays"]]


def test_a_protected_process_in_the_family_stops_the_switch(shell, tmp_path):
    """The family is stopped without the selector's refusals: a protected executable that joined it (titled
    sglang::, in the server's session) is a problem, not a target."""
    exe = tmp_path / "bin" / "dockerd"
    exe.parent.mkdir()
    shutil.copy("/bin/sleep", str(exe))
    port = free_port()
    shell("%s > s.log 2>&1 & sleep 0.5; ( exec -a sglang::scheduler_TP9 %s 600 & ); wait" % (server_cmd(port), exe))
    wait_listening(port)

    def looked():
        f = _preflight.inspect(port, "sglang", [], run=Systemctl())
        return f if f["problems"] else None
    found = wait_for(looked, 15)
    (why,) = found["problems"]
    assert "is of the server's family and is never stopped: protected (dockerd)" in why, why


def _inspect(port, tmp_path, **kw):
    return _preflight.inspect(port, "sglang", [str(tmp_path / "nvidia*")], run=Systemctl(), **kw)


def _schedulers(found, n):
    return found if len([m for m in found["family"] if m["cmdline"].startswith("sglang::scheduler")]) == n else None


def test_a_titled_member_never_widens_the_servers_gpus(shell, run, tmp_path):
    """The owner titles a process of the server's session sglang::scheduler_TP7 and has it open /dev/nvidia3 (no
    CUDA context): the server's GPUs are still those its arguments give (--tp 2: 0 and 1), so another job on GPU 3
    is nothing of the switch's."""
    for n in range(4):
        (tmp_path / ("nvidia%d" % n)).touch()
    port = free_port()
    shell("%s > s.log 2>&1 & sleep 0.5; ( exec 3<nvidia3 -a sglang::scheduler_TP7 sleep 600 & ); wait" % server_cmd(port))
    wait_listening(port)
    job = run(programs.HOLDER, str(tmp_path / "nvidia3"))[0]
    found = wait_for(lambda: _schedulers(_inspect(port, tmp_path), 3), 15)
    assert found["gpus"] == [0, 1], found["gpus"]
    assert found["gpus_from"] == "its arguments (GPUs [0, 1])"
    assert job.pid not in [s["pid"] for s in found["strays"]] and found["problems"] == []


def test_the_servers_gpus_come_from_its_arguments_through_cuda_visible_devices(shell, tmp_path):
    """--tp 2 --base-gpu-id 1 --gpu-id-step 2 places the schedulers on the server's GPUs 1 and 3, which
    CUDA_VISIBLE_DEVICES=2,3,5,7 makes GPUs 3 and 7 (the double's schedulers open other device files: they count for
    nothing). An operator's gpus override them."""
    for n in range(8):
        (tmp_path / ("nvidia%d" % n)).touch()
    port = free_port()
    shell("CUDA_VISIBLE_DEVICES=2,3,5,7 %s --base-gpu-id 1 --gpu-id-step 2 > s.log 2>&1 & wait" % server_cmd(port))
    wait_listening(port)
    found = wait_for(lambda: _schedulers(_inspect(port, tmp_path), 2), 15)
    assert found["gpus"] == [3, 7], found["gpus"]
    assert found["gpus_from"] == "its arguments (GPUs [1, 3]) through CUDA_VISIBLE_DEVICES=2,3,5,7"
    assert _inspect(port, tmp_path, gpus=[4])["gpus"] == [4]


def test_another_sglang_server_on_the_same_gpu_is_a_neighbour_never_a_stray(shell, tmp_path):
    """Two small servers side by side on GPU 0, each listening on its own port: to the switch of either the other's
    processes are neighbours - not strays, no problem - and whether the memory the old family frees is what the unit
    needs is said to be unknowable here (no nvidia-smi)."""
    a, b = free_port(), free_port()
    shell("%s --tp 1 --mem-fraction-static 0.4 > a.log 2>&1 & %s --tp 1 --mem-fraction-static 0.4 > b.log 2>&1 & wait"
          % (server_cmd(a), server_cmd(b)))
    wait_listening(a)
    (b_server,) = wait_listening(b)
    command = ["/v/bin/python", "-m", "sglang.launch_server", "--port", str(a), "--mem-fraction-static", "0.4"]

    def looked():
        f = _schedulers(_inspect(a, tmp_path, command=command), 1)
        return f if f and f["neighbours"] else None
    found = wait_for(looked, 15)
    assert found["gpus"] == [0] and found["strays"] == [] and found["problems"] == []
    (near,) = found["neighbours"]
    assert near["port"] == b and near["cmdline"].startswith("sglang::scheduler")
    assert near["pid"] in _procfs.descendants(_procfs.snapshot(), [b_server])
    assert found["gpu_memory"] == {"known": False, "why": "nvidia-smi is not there to read the GPUs' memory"}
    assert any("shared with another SGLang server" in w for w in found["warnings"])
