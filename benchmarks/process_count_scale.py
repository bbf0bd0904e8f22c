"""process_count's time inside the module with 10,000 extra processes on the host.

Goal: <= 0.5 s. The module's own `elapsed` is its time inside the module (the scan of /proc and the
matching); the task's wall time (Ansible's own overhead included) is shown beside it.
Usage: make bench-count   (EXTRA=10000, RUNS=5 by default)
"""
import ctypes
import os
import signal
import time

from _common import median, playbook, table

EXTRA = int(os.environ.get("EXTRA", "10000"))
RUNS = int(os.environ.get("RUNS", "5"))


def spawn_sleepers(n):
    """A parent that forks n children which pause; returns the parent's pid."""
    r, w = os.pipe()
    pid = os.fork()
    if pid:
        os.close(w)
        os.read(r, 1)
        return pid
    os.close(r)
    os.setsid()
    kids = 0
    for dummy in range(n):
        if os.fork() == 0:
            os.close(w)
            signal.pause()
            os._exit(0)
        kids += 1
    os.write(w, b"1")
    signal.pause()
    os._exit(0)


def count_procs():
    return sum(1 for d in os.listdir("/proc") if d.isdigit())


def measure():
    task = {"name": "count", "inferops.sglang.process_count": {"pattern": r"sglang\.launch_server"}}
    inside, wall = [], []
    for dummy in range(RUNS):
        t0 = time.monotonic()
        results, rc = playbook([task])
        wall.append(time.monotonic() - t0)
        assert rc == 0, results
        inside.append(results[0]["elapsed"])
    return inside, wall


def reap_all():
    while True:
        try:
            os.waitpid(-1, 0)
        except ChildProcessError:
            return


def main():
    # the sleepers' orphans come back to us (a subreaper) to be reaped, not to a PID 1 that may not reap
    ctypes.CDLL(None).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
    rows = []
    base = count_procs()
    inside, wall = measure()
    rows.append((base, "%.3f" % median(inside), "%.3f" % max(inside), "%.2f" % median(wall)))
    t0 = time.monotonic()
    parent = spawn_sleepers(EXTRA)
    try:
        started = time.monotonic() - t0
        n = count_procs()
        inside, wall = measure()
        rows.append((n, "%.3f" % median(inside), "%.3f" % max(inside), "%.2f" % median(wall)))
    finally:
        os.killpg(parent, signal.SIGKILL)
        reap_all()
    table("process_count with %d extra processes (%d runs each; spawning them took %.1f s)" % (EXTRA, RUNS, started),
          ["processes on host", "inside module median s", "max s", "task wall s"], rows)
    print("goal: inside module <= 0.5 s with the extra processes")


if __name__ == "__main__":
    main()
