"""The model's load after the switch with the page cache cold, with cutover_prewarm off and auto.

A model folder of SIZE_GB of incompressible data (8 safetensors files) is mounted into a test-bed container
(systemd, reached over SSH with pipelining, as in production) where the SGLang double serves it under nohup and
reads every file of it while it loads (SGLANG_DOUBLE_READ_MODEL=1), as the real server reads its weights. Before
each cutover the model's pages are dropped from the host's page cache (POSIX_FADV_DONTNEED on each file, checked
with mincore: the other helpers' caches on this host are left alone), then playbooks/cutover.yml runs with
cutover_prewarm off or auto. Measured: the new server's load (the double's `loading` to its port open), the
downtime (the gap without a /ready 200, polled every 50 ms on the host), the prewarm's own time (the record's
model_cache.warm.seconds, spent while the old server serves) and the cutover's wall time.

`make bench-prewarm` (RUNS=3 SIZE_GB=2 LOAD=0.5 by default). Prints a table; writes docs/benchmarks/prewarm.md and
docs/benchmarks/prewarm.png. The folder is deleted at the end.
"""
import json
import os
import shutil
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT / ".cache" / "collections"))
from _common import page, table  # noqa: E402  pylint: disable=wrong-import-position
from _testbed import Testbed  # noqa: E402  pylint: disable=wrong-import-position
from cutover_downtime import PROBE  # noqa: E402  pylint: disable=wrong-import-position
from ansible_collections.inferops.sglang.plugins.module_utils._host import (  # noqa: E402  pylint: disable=wrong-import-position
    pagecache as _pagecache)

RUNS = int(os.environ.get("RUNS", "3"))
SIZE_GB = float(os.environ.get("SIZE_GB", "2"))
LOAD = os.environ.get("LOAD", "0.5")
FILES = 8
MODEL = ROOT / "tests" / "output" / "bench-prewarm-model"
OUT = ROOT / "docs" / "benchmarks"
HOST = "ours"
BED = Testbed([HOST], prefix="inferops-bench-prewarm", volumes=["%s:/models/prewarm:ro" % MODEL])
LAUNCH = ("cd /root; SGLANG_DOUBLE_READ_MODEL=1 SGLANG_DOUBLE_LOAD_SECONDS=%s SGLANG_DOUBLE_WARMUP_SECONDS=1 "
          "SGLANG_DOUBLE_STATE_FILE=/root/double-state.jsonl SGLANG_DOUBLE_DEVICES='/dev/nvidia*' "
          "nohup /opt/sglang/venv/bin/python -m sglang.launch_server --model-path /models/prewarm --tp 2 "
          "--port 30000 > /root/sglang.log 2>&1 < /dev/null &")


def make_model():
    MODEL.mkdir(parents=True, exist_ok=True)
    per = int(SIZE_GB * 1e9 / FILES)
    for i in range(FILES):
        with open(MODEL / ("model-%05d-of-%05d.safetensors" % (i + 1, FILES)), "wb") as f:
            left = per
            while left:
                n = min(left, 16 << 20)
                f.write(os.urandom(n))
                left -= n
            f.flush()
            os.fsync(f.fileno())
    (MODEL / "config.json").write_text("{}\n")


def paths():
    return sorted(str(p) for p in MODEL.glob("*.safetensors"))


def evict():
    """The model out of the page cache; returns the share still resident (checked)."""
    for path in paths():
        fd = os.open(path, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)
    held = _pagecache.residency(paths())
    return held["resident"] / held["bytes"]


def ssh(cmd):
    return BED.ssh(HOST, cmd)


def adhoc():
    """The host as the seeds left it: the double under nohup, ready (it read the model)."""
    ssh("systemctl disable --now sglang-30000 2>/dev/null; rm -f /root/double-state.jsonl; "
        "for n in 0 1; do touch /dev/nvidia$n; done; touch /dev/nvidiactl /dev/nvidia-uvm")
    ssh(LAUNCH % LOAD)
    BED.wait_ready(HOST)


def cutover(mode):
    """One cutover with the model cold: load of the new server, downtime, prewarm, wall."""
    cold = evict()
    ssh("cat > /root/probe.py <<'EOF'\n%s\nEOF\nnohup python3 /root/probe.py /root/probe.log > /dev/null 2>&1 < /dev/null &"
        % PROBE)
    time.sleep(0.5)
    wall, dummy = BED.playbook(ROOT / "playbooks" / "cutover.yml", HOST, "-e", "cutover_prewarm=%s" % mode)
    time.sleep(0.5)
    ssh("pkill -f /root/probe.py")
    samples = [line.split() for line in ssh("cat /root/probe.log").splitlines() if line.strip()]
    ok = [float(t) for t, c in samples if c == "200"]
    gap = max((b - a for a, b in zip(ok, ok[1:])), default=float("nan"))
    events = [json.loads(line) for line in ssh("cat /root/double-state.jsonl").splitlines() if line.strip()]
    new = [e["pid"] for e in events if e["event"] == "ready"][-1]
    loading = [e["time"] for e in events if e["pid"] == new and e["event"] == "loading"][0]
    port_open = [e["time"] for e in events if e["pid"] == new and e["event"] == "warmup"][0]
    record = json.loads(ssh("cat /var/lib/inferops/cutover/30000/last.json"))
    cache = record.get("model_cache") or {}
    warm = cache.get("warm") or {}
    return {"load": port_open - loading, "gap": gap, "prewarm": warm.get("seconds", 0.0), "wall": wall,
            "cold": cold, "resident_before": cache.get("resident", 0) / max(1, cache.get("bytes", 1)),
            "read": warm.get("read", 0), "summary": cache.get("summary")}


def chart(rows, path):
    import matplotlib  # pylint: disable=import-outside-toplevel
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # pylint: disable=import-outside-toplevel
    labels = ["load after the switch (s)", "downtime (s)", "prewarm, old server serving (s)"]
    fig, ax = plt.subplots(figsize=(7, 3.5))
    x = range(len(labels))
    for shift, mode in ((-0.2, "off"), (0.2, "auto")):
        r = rows[mode]
        ax.bar([i + shift for i in x], [r["load"], r["gap"], r["prewarm"]], 0.4, label="cutover_prewarm: %s" % mode)
    ax.set_xticks(list(x))
    ax.set_xticklabels(labels)
    ax.set_title("Cutover with the model (%.1f GB) out of the page cache, median of %d" % (SIZE_GB, RUNS))
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def main():
    make_model()
    runs = {"off": [], "auto": []}
    try:
        BED.up()
        for i in range(RUNS):
            for mode in ("off", "auto"):
                if i == 0 and mode == "off":
                    adhoc()
                else:
                    BED.playbook(ROOT / "playbooks" / "rollback.yml", HOST)  # back to the captured ad-hoc server
                runs[mode].append(cutover(mode))
                print("run %d %s: %s" % (i + 1, mode, runs[mode][-1]), flush=True)
    finally:
        BED.down()
        shutil.rmtree(str(MODEL), ignore_errors=True)
    rows = dict((mode, dict((k, statistics.median(r[k] for r in rs)) for k in ("load", "gap", "prewarm", "wall", "cold")))
                for mode, rs in runs.items())
    header = ["cutover_prewarm", "model resident before (%)", "load after the switch (s)", "downtime (s)",
              "prewarm, old server serving (s)", "wall (s)"]
    body = [[mode, "%.0f" % (100 * r["cold"]), "%.2f" % r["load"], "%.2f" % r["gap"], "%.2f" % r["prewarm"],
             "%.1f" % r["wall"]] for mode, r in rows.items()]
    title = ("Prewarm, median of %d runs (%.1f GB model in %d files, out of the page cache before each cutover; "
             "a stand-in server: reads its model + %s s load + 1 s warm-up)" % (RUNS, SIZE_GB, FILES, LOAD))
    table(title, header, body)
    ratio = rows["auto"]["load"] / rows["off"]["load"]
    lines = [
        "load after the switch, auto / off: %.2f: warmed before the stop, the new server loads in %.0f %% of the time" % (
            ratio, 100 * ratio),
        "downtime: %.2f s -> %.2f s (%.2f s less); the prewarm took %.2f s before the stop, while the old server served"
        % (rows["off"]["gap"], rows["auto"]["gap"], rows["off"]["gap"] - rows["auto"]["gap"], rows["auto"]["prewarm"]),
        "the record says: %s" % runs["auto"][-1]["summary"],
    ]
    page(OUT, "prewarm", title, header, body, lines)
    chart(rows, OUT / "prewarm.png")


if __name__ == "__main__":
    main()
