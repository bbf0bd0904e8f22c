"""What every test tree shares: a free port on loopback, and waiting on a condition with a deadline."""
import os
import random
import socket
import time

# A test's server listens on a port of its test process's own block, below the kernel's ephemeral range (32768-60999
# by default, /proc/sys/net/ipv4/ip_local_port_range). A port that bind(("127.0.0.1", 0)) gave and that was then
# released is free only until the kernel gives it to the next socket that asks for any port: another pytest
# worker's (another test's server, on the same port), or a client connection's own end. A server started on it a
# moment later found it taken ("address already in use"), and its test's wait talked to the other test's server.
PORTS_FIRST = 20000
PORTS_BLOCK = 1000
PORTS_BLOCKS = 10  # 20000-29999: the last block for a process outside pytest-xdist's workers
_ports = {}


def _block():
    """The first port of this process's block: pytest-xdist's worker gwN has block N, any other process the last."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    index = int(worker[2:]) % (PORTS_BLOCKS - 1) if worker[:2] == "gw" and worker[2:].isdigit() else PORTS_BLOCKS - 1
    return PORTS_FIRST + index * PORTS_BLOCK


def _bindable(port):
    """Whether nothing holds the port, on any address (no SO_REUSEADDR: a connection of it in TIME_WAIT counts)."""
    for family, address in ((socket.AF_INET, "0.0.0.0"), (socket.AF_INET6, "::")):
        try:
            s = socket.socket(family, socket.SOCK_STREAM)
        except OSError:
            continue  # no IPv6 here
        try:
            if family == socket.AF_INET6:
                s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            s.bind((address, port))
        except OSError:
            return False
        finally:
            s.close()
    return True


def free_port():
    """A port nothing holds, from this process's block, each in turn (from a random start, once per process)."""
    first = _block()
    if first not in _ports:
        _ports[first] = random.randrange(PORTS_BLOCK)
    for dummy in range(PORTS_BLOCK):
        _ports[first] = (_ports[first] + 1) % PORTS_BLOCK
        if _bindable(first + _ports[first]):
            return first + _ports[first]
    raise RuntimeError("no free port in %d-%d" % (first, first + PORTS_BLOCK - 1))


def wait_for(cond, timeout=10.0, interval=0.01):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = cond()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError("condition not met within %.1fs" % timeout)


def unlink_recorded_shm(root):
    """Unlink, in /dev/shm, every segment that an SGLang double under `root` recorded as created (the `<state
    file>.shm` records, sglang/_double/shm.py): a test's doubles leave, like the real server, what a SIGKILL skips."""
    import glob  # pylint: disable=import-outside-toplevel
    import json  # pylint: disable=import-outside-toplevel
    import os  # pylint: disable=import-outside-toplevel
    for path in glob.glob(os.path.join(str(root), "**", "*.shm"), recursive=True):
        try:
            with open(path) as f:
                names = [json.loads(line)["name"] for line in f if line.strip()]
        except (OSError, ValueError, KeyError):
            continue
        for name in names:
            if "/" in name or name.startswith("."):
                continue
            try:
                os.unlink(os.path.join("/dev/shm", name))
            except OSError:
                pass
