"""Several nodes (`--nnodes N --node-rank R --dist-init-addr HOST:PORT`): the rendezvous, the link that stays up
between the ranks, and the dummy health server of a rank >= 1, as the real wheels do them (file:line per version in
each docstring; the wheels' own words are quoted where the double logs them).

The real rendezvous is torch.distributed's: every scheduler calls init_process_group with
`tcp://<--dist-init-addr>` and `timeout=--dist-timeout` (0.5.5 sglang/srt/model_executor/model_runner.py:605-639,
0.5.9 model_runner.py:776-810, 0.5.15 model_runner.py:1275-1308, 0.5.23 sglang/srt/distributed/bootstrap.py:241-328);
the global rank 0 (node 0's first scheduler) hosts the TCPStore there and waits for the whole world, the others
connect to it. `--dist-timeout` unset passes None, and torch then uses its default for the NCCL backend (10 minutes
in the torch each wheel pins: 2.8.0, 2.9.1, 2.11.0, 2.14.1): SGLANG_DOUBLE_DIST_TIMEOUT_SECONDS, 600 by default.
The double does it in the main process over one TCP connection per rank >= 1 (a line `rank R of N`, answered
`ready` once every rank joined), and keeps that connection as the group: what rank 0 sends on it is the shutdown
broadcast, and its end is a peer that died.

A scheduler whose collective fails (the rendezvous timing out, a peer gone) raises; run_scheduler_process's
`except Exception` logs "Scheduler hit an exception" and sends SIGQUIT to its parent (0.5.5 managers/scheduler.py:
2844-2847, 0.5.15 scheduler.py:4331-4334, 0.5.23 scheduler.py:6370-6373), whose launch-phase handler
`kill_process_tree(os.getpid())` SIGKILLs the tree and the process itself (0.5.5 entrypoints/engine.py:738-744,
0.5.15 engine.py:1326-1332, 0.5.23 engine.py:1976-1982; utils/common.py kill_process_tree: `itself.kill()`).
"""
import socket
import threading
import time

HELLO = "rank %d of %d\n"
READY = b"ready\n"
SHUTDOWN = b"shutdown\n"
LOADED = b"loaded\n"

# launch_dummy_health_check_server's routes, every one `@app.get` answering 200 (0.5.5 utils/common.py:2322-2341,
# 0.5.9 common.py:2656, 0.5.15 common.py:3006, 0.5.23 common.py:3624-3650); the app has no --api-key middleware
DUMMY_ROUTES = ("/ping", "/health", "/health_generate")


class RendezvousTimeout(Exception):
    """torch.distributed's DistStoreError / DistNetworkError: the world did not form within the timeout."""


def parse_addr(addr):
    """(host, port) of --dist-init-addr: `host:port` or `[v6]:port` (the real NetworkAddress.parse)."""
    host, sep, port = addr.rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError("please provide --dist-init-addr as host:port of head node, not %r" % addr)
    return host.strip("[]"), int(port)


class Group:
    """This node's place in the multi-node server: rank 0 holds a link to every other rank, a rank >= 1 one link."""

    def __init__(self, args, timeout):
        self.nnodes = args.nnodes
        self.rank = args.node_rank
        self.addr = args.dist_init_addr
        self.timeout = timeout
        self.links = []
        self.closed = False

    def join(self, log):
        """Blocks until every rank joined (rank 0: listening at --dist-init-addr; others: connecting to it), or
        raises RendezvousTimeout after `timeout` seconds."""
        deadline = time.monotonic() + self.timeout
        if self.addr is None:
            # without --dist-init-addr each node's schedulers meet at 127.0.0.1 on a port of their own
            # (model_runner.py `tcp://127.0.0.1:{self.dist_port}`): the nodes never meet
            time.sleep(self.timeout)
            raise RendezvousTimeout("Timed out after %d seconds waiting for clients. 1/%d clients joined."
                                    % (self.timeout, self.nnodes))
        host, port = parse_addr(self.addr)
        if self.rank == 0:
            self._serve(port, deadline, ":" in host)
        else:
            self._connect(host, port, deadline)
        log("Init torch distributed ends. world formed: %d nodes at %s" % (self.nnodes, self.addr))

    def _serve(self, port, deadline, ipv6):
        # the TCPStore's server listens on every address of the port
        lsock = socket.socket(socket.AF_INET6 if ipv6 else socket.AF_INET, socket.SOCK_STREAM)
        lsock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        lsock.bind(("::" if ipv6 else "0.0.0.0", port))
        lsock.listen(64)
        joined = {}
        try:
            while len(joined) < self.nnodes - 1:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise RendezvousTimeout("Timed out after %d seconds waiting for clients. %d/%d clients joined."
                                            % (self.timeout, len(joined) + 1, self.nnodes))
                lsock.settimeout(min(left, 0.2))
                try:
                    conn, dummy = lsock.accept()
                except socket.timeout:
                    continue
                conn.settimeout(max(deadline - time.monotonic(), 0.1))
                try:
                    words = conn.makefile("rb").readline().decode().split()
                    rank, nnodes = int(words[1]), int(words[3])
                except (OSError, ValueError, IndexError):
                    conn.close()
                    continue
                if nnodes != self.nnodes or not 0 < rank < self.nnodes or rank in joined:
                    conn.close()  # not one of this world's ranks: torch's store counts it out too
                    continue
                joined[rank] = conn
        finally:
            lsock.close()
        for conn in joined.values():
            conn.settimeout(None)
            conn.sendall(READY)
        self.links = list(joined.values())

    def _connect(self, host, port, deadline):
        # the TCPStore's client retries the connection until the timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise RendezvousTimeout("The client socket has timed out after %dms while trying to connect to "
                                        "(%s, %d)." % (self.timeout * 1000, host, port))
            try:
                conn = socket.create_connection((host, port), timeout=min(left, 1.0))
            except OSError:
                time.sleep(min(0.1, max(left, 0)))
                continue
            try:
                conn.settimeout(max(deadline - time.monotonic(), 0.1))
                conn.sendall((HELLO % (self.rank, self.nnodes)).encode())
                if conn.recv(len(READY)) == READY:
                    conn.settimeout(None)
                    self.links = [conn]
                    return
            except OSError:
                pass
            conn.close()
            time.sleep(0.1)

    def watch(self, on_shutdown, on_lost):
        """A thread per link from the group's forming on: `shutdown` from rank 0 calls on_shutdown(), `loaded` from a
        rank >= 1 counts towards all_loaded(), the link's end calls on_lost()."""
        self._loaded = threading.Semaphore(0)
        for conn in self.links:
            threading.Thread(target=self._read, args=(conn, on_shutdown, on_lost), daemon=True).start()

    def _read(self, conn, on_shutdown, on_lost):
        lines = conn.makefile("rb")
        while True:
            try:
                got = lines.readline()
            except OSError:
                got = b""
            if self.closed:
                return
            if got == LOADED:
                self._loaded.release()
                continue
            if got == SHUTDOWN:
                return on_shutdown()
            return on_lost()

    def loaded(self):
        """The end of loading: a rank >= 1 says its schedulers are ready; rank 0 waits until every rank did. Loading
        is collective (the TP group's memory all-reduce, the CUDA graphs' capture), so rank 0 is never ready before
        the last rank finished loading."""
        if self.rank:
            self.links[0].sendall(LOADED)
            return
        for dummy in self.links:
            self._loaded.acquire()

    def broadcast_shutdown(self):
        """Rank 0: the ShutdownReq every TP rank receives, the other nodes' included."""
        for conn in self.links:
            try:
                conn.sendall(SHUTDOWN)
            except OSError:
                pass

    def close(self):
        self.closed = True
        for conn in self.links:
            try:
                conn.close()
            except OSError:
                pass
