"""Downtime and wall time of a cutover: playbooks/cutover.yml against a stock cutover done by hand with
ansible.builtin pieces (benchmarks/cutover/stock.yml), side by side in one run.

Two test-bed containers (systemd, reached over SSH with pipelining and ControlPersist, as in production) run
the SGLang double under nohup with a fixed load time. A prober on each host polls /ready every 50 ms; the
downtime is the gap without a ready answer, and its overhead is that gap minus the new server's own start
(its loading + warm-up, from the double's event file). No client traffic while that is measured; the drain
of a request in flight is measured on its own afterwards. Also: the idempotent rerun on a migrated host.

`make bench-cutover` (RUNS=3 LOAD=10 by default). Prints a table; writes docs/benchmarks/cutover.md and
docs/benchmarks/cutover.png.
"""
import json
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
from _common import page, table  # noqa: E402  pylint: disable=wrong-import-position
from _testbed import Testbed  # noqa: E402  pylint: disable=wrong-import-position

RUNS = int(os.environ.get("RUNS", "3"))
LOAD = os.environ.get("LOAD", "10")
BED = Testbed(["ours", "stock"])
OUT = ROOT / "docs" / "benchmarks"

PROBE = r'''
import sys, time, urllib.request, urllib.error
out = open(sys.argv[1], "w", buffering=1)
while True:
    t = time.time()
    try:
        with urllib.request.urlopen("http://127.0.0.1:30000/ready", timeout=1) as r:
            code = r.status
    except urllib.error.HTTPError as e:
        code = e.code
    except OSError:
        code = 0
    out.write("%.3f %d\n" % (t, code))
    time.sleep(max(0.0, 0.05 - (time.time() - t)))
'''


def playbook(path, host):
    wall, recap = BED.playbook(path, host, "-e", "stock_load=%s" % LOAD)
    return wall, recap[host][0]


def ssh(host, cmd):
    return BED.ssh(host, cmd)


def adhoc(host):
    BED.adhoc(host, LOAD)
    BED.wait_ready(host)


def probed(host, path, *extra):
    """Run the playbook with the prober on; returns wall, changed, the samples [(time, status)] and the longest gap
    between two ready answers."""
    ssh(host, "cat > /root/probe.py <<'EOF'\n%s\nEOF\nnohup python3 /root/probe.py /root/probe.log > /dev/null 2>&1 < /dev/null &"
        % PROBE)
    time.sleep(0.5)
    wall, recap = BED.playbook(path, host, "-e", "stock_load=%s" % LOAD, *extra)
    time.sleep(0.5)
    ssh(host, "pkill -f /root/probe.py")
    samples = [line.split() for line in ssh(host, "cat /root/probe.log").splitlines() if line.strip()]
    samples = [(float(t), int(c)) for t, c in samples]
    ok = [t for t, c in samples if c == 200]
    gap = max((b - a for a, b in zip(ok, ok[1:])), default=float("nan"))
    return wall, recap[host][0], samples, gap


def adopted():
    """cutover_mode adopt of an ad-hoc server (on the host the stock procedure used, as the seeds left it again):
    failed probes, the longest gap, the wall time."""
    adhoc("stock")
    wall, changed, samples, gap = probed("stock", ROOT / "playbooks" / "cutover.yml", "-e", "cutover_mode=adopt")
    failed = sum(1 for dummy, c in samples if c != 200)
    return {"wall": wall, "gap": gap, "failed": failed, "probes": len(samples), "changed": changed}


def measured(host, path):
    """Run the playbook with the prober on; returns wall, downtime, the new server's own start, changed."""
    wall, changed, samples, gap = probed(host, path)
    events = [json.loads(line) for line in ssh(host, "cat /root/double-state.jsonl").splitlines() if line.strip()]
    new = [e["pid"] for e in events if e["event"] == "ready"][-1]
    start = [e["time"] for e in events if e["pid"] == new and e["event"] == "loading"][0]
    ready = [e["time"] for e in events if e["pid"] == new and e["event"] == "ready"][0]
    stopped = [e["time"] for e in events if e["event"] == "stopped"]
    down = [t for t, c in samples if c != 200]
    # the old server's stop: ours ends it once drained (the switch's "stop server" step); the stock playbook
    # waits for its own exit, from the first sample without 200 to its "stopped" event
    steps = json.loads(ssh(host, "cat /var/lib/inferops/cutover/30000/switch.json 2>/dev/null || echo '{}'")).get("steps", [])
    stop = [st["seconds"] for st in steps if st["step"] == "stop server"]
    if host == "ours" and stop:
        shutdown = stop[0]
    else:
        shutdown = (stopped[-1] - down[0]) if stopped and down and stopped[-1] > down[0] else 0.0
    return {"wall": wall, "gap": gap, "start": ready - start, "shutdown": shutdown, "changed": changed}


def drain():
    """A request in flight when ours stops the server: how long the drain took, and whether it completed."""
    adhoc("ours")
    client = ("nohup python3 -c \"import json, urllib.request as u; r = u.Request('http://127.0.0.1:30000/generate', "
              "data=json.dumps({'text': 'hi', 'sampling_params': {'max_new_tokens': 60}}).encode(), "
              "headers={'Content-Type': 'application/json'}); print(u.urlopen(r, timeout=120).status)\" "
              "> /root/client.log 2>&1 < /dev/null &")
    ssh("ours", client)
    time.sleep(0.5)
    playbook(ROOT / "playbooks" / "cutover.yml", "ours")
    steps = json.loads(ssh("ours", "cat /var/lib/inferops/cutover/30000/switch.json"))["steps"]
    stop = [s for s in steps if s["step"] == "stop server"][0]
    return stop["seconds"], ssh("ours", "cat /root/client.log").strip()


def chart(rows, path):
    import matplotlib  # pylint: disable=import-outside-toplevel
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # pylint: disable=import-outside-toplevel
    labels = ["downtime overhead (s)", "wall time minus L (s)"]
    ours = [rows["ours"]["overhead"], rows["ours"]["wall_minus_l"]]
    stock = [rows["stock"]["overhead"], rows["stock"]["wall_minus_l"]]
    fig, ax = plt.subplots(figsize=(7, 3.5))
    x = range(len(labels))
    ax.bar([i - 0.2 for i in x], ours, 0.4, label="playbooks/cutover.yml")
    ax.bar([i + 0.2 for i in x], stock, 0.4, label="stock (kill, sleep 3, fuser -k, /health every 5 s)")
    ax.set_xticks(list(x))
    ax.set_xticklabels(labels)
    ax.set_title("Cutover of a stand-in server (L = %s s load + 1 s warm-up), median of %d" % (LOAD, RUNS))
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def main():
    BED.up()
    runs = {"ours": [], "stock": []}
    reruns = []
    try:
        for i in range(RUNS):
            for host, path in (("ours", ROOT / "playbooks" / "cutover.yml"),
                               ("stock", ROOT / "benchmarks" / "cutover" / "stock.yml")):
                if host == "ours" and i > 0:
                    playbook(ROOT / "playbooks" / "rollback.yml", "ours")  # back to the captured ad-hoc server
                else:
                    adhoc(host)
                runs[host].append(measured(host, path))
                print("run %d %s: %s" % (i + 1, host, runs[host][-1]), flush=True)
            reruns.append(playbook(ROOT / "playbooks" / "cutover.yml", "ours"))
        adopt = adopted()
        print("adopt: %s" % adopt, flush=True)
        drain_s, drained = drain()
    finally:
        BED.down()
    rows = {}
    for host, rs in runs.items():
        rows[host] = dict((k, statistics.median(r[k] for r in rs)) for k in ("gap", "start", "wall", "shutdown"))
        rows[host]["overhead"] = statistics.median(r["gap"] - r["start"] for r in rs)
        rows[host]["own"] = statistics.median(r["gap"] - r["start"] - r["shutdown"] for r in rs)
        rows[host]["wall_minus_l"] = statistics.median(r["wall"] - r["start"] for r in rs)
    rerun = statistics.median(r[0] for r in reruns)
    header = ["", "gap without /ready 200 (s)", "new server's own start L (s)", "downtime overhead = gap - L (s)",
              "of it, the old server's stop (s)", "the rest (s)", "wall (s)", "wall minus L (s)"]
    body = [[h, "%.2f" % r["gap"], "%.2f" % r["start"], "%.2f" % r["overhead"], "%.2f" % r["shutdown"],
             "%.2f" % r["own"], "%.1f" % r["wall"], "%.1f" % r["wall_minus_l"]] for h, r in rows.items()]
    body.append(["adopt (cutover_mode adopt, one run)", "%.2f" % adopt["gap"], "-",
                 "%d failed probes of %d" % (adopt["failed"], adopt["probes"]), "-", "-", "%.1f" % adopt["wall"], "-"])
    title = "Cutover, median of %d runs (a stand-in server: %s s load + 1 s warm-up; SSH with pipelining)" % (
        RUNS, LOAD)
    table(title, header, body)
    ratio = rows["ours"]["wall_minus_l"] / rows["stock"]["wall_minus_l"]
    lines = [
        "ours / stock wall minus L: %.2f: apart from the new server's own start, the cutover takes %.0f %% of the time "
        "of the stock one (kill, sleep 3, fuser -k, /health polled every 5 s)" % (ratio, 100 * ratio),
        "ours downtime overhead: %.2f s beyond the new server's own start, of which the old server's stop %.2f s "
        "(SIGTERM, then KILL once nothing is in flight; SGLang itself looks at its drain every 5 s)"
        % (rows["ours"]["overhead"], rows["ours"]["shutdown"]),
        "idempotent rerun on the migrated host: median %.1f s, tasks changed per rerun: %s"
        % (rerun, sorted(set(c for dummy, c in reruns))),
        "drain: a 60-token request in flight at the stop: the stop took %.2f s; the client got %s" % (drain_s, drained),
        "adopt in place: %d failed probes of %d at 50 ms, longest gap between ready answers %.2f s, wall %.1f s"
        % (adopt["failed"], adopt["probes"], adopt["gap"], adopt["wall"]),
    ]
    page(OUT, "cutover", title, header, body, lines, real_server())
    chart(rows, OUT / "cutover.png")


def real_server():
    """The section on a real SGLang server, from the newest run of the cutover suite on a GPU host that passed
    (tests/gpu/real/results/DATE/cutover-N*.json, committed; docs/gpu-validation.md): the prober's gap, the
    record's switch and load, and `systemctl restart` of the same unit for comparison."""
    runs = []
    for checks in (ROOT / "tests" / "gpu" / "real" / "results").glob("*/cutover-*.json"):
        stem = checks.stem
        if not stem[len("cutover-"):].isdigit():
            continue
        times, record = checks.with_name(stem + "-times.json"), checks.with_name(stem + "-record-30000.json")
        if times.exists() and record.exists() and all(c["ok"] for c in json.loads(checks.read_text()).values()):
            runs.append((checks.parent.name, int(stem[len("cutover-"):]), times, record))
    if not runs:
        return ""
    date, dummy, times, record = max(runs)
    t, r = json.loads(times.read_text()), json.loads(record.read_text())
    stop = [s["seconds"] for s in r["steps"] if s["step"] == "stop server"][0]
    gap, load = t["switch_gap_s"], r["load_sec"]
    return (
        "## On a real SGLang server\n\n"
        "SGLang %s on one H200, a tiny Llama (`tests/gpu/real/`), the cutover under systemd 252 with a local "
        "connection, one run on %s ([gpu-validation.md](../gpu-validation.md)); /health polled every 50 ms.\n\n"
        "|  | gap without /health 200 (s) | new server's own start L (s) | downtime overhead = gap - L (s) | "
        "the host's record: switch + load = until ready (s) | wall (s) |\n|---|---|---|---|---|---|\n"
        "| ours, real %s | %.2f | %.2f | %.2f | %.2f (stop %.2f) + %.2f = %.2f | %.1f |\n"
        "| `systemctl restart` of the unit it wrote | %.2f | - | - | - | - |\n\n"
        "- a plain `systemctl restart` of the unit (the same stop and start, by systemd) left the port without a "
        "ready answer %.2f s longer than the switch: one run each, so no more than that the switch adds nothing "
        "a restart does not\n"
        "- the record's switch (%.2f s) is longer than the overhead the prober sees (%.2f s): the old server still "
        "answers /health for part of its stop\n"
        % (r["sglang_version"], date, r["sglang_version"], gap, load, gap - load, r["downtime_switch_sec"], stop,
           load, r["downtime_until_ready_sec"], t["cutover_playbook_s"], t["restart_gap_s"],
           t["restart_gap_s"] - gap, r["downtime_switch_sec"], gap - load))


if __name__ == "__main__":
    main()
