"""What every test tree shares: a free port on loopback, and waiting on a condition with a deadline."""
import socket
import time


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


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
