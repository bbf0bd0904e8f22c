"""A fleet cutover against single-host cutovers, in one run: 16 hosts in 4 batches (serial 4) by one
playbooks/cutover.yml run, against the same playbook on one host alone (two fresh hosts, the median).
Goal: the fleet's wall time <= 1.25 x 4 single-host cutovers. Also what each container costs in memory.

`make bench-fleet` (HOSTS=16 LOAD=5 by default). Prints a table; writes docs/benchmarks/fleet.md.
"""
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
from _common import table  # noqa: E402  pylint: disable=wrong-import-position
from _testbed import Testbed, sh  # noqa: E402  pylint: disable=wrong-import-position

N = int(os.environ.get("HOSTS", "16"))
LOAD = os.environ.get("LOAD", "5")
FLEET = ["fleet%02d" % i for i in range(1, N + 1)]
SINGLES = ["single1", "single2"]
BED = Testbed(FLEET + SINGLES, prefix="inferops-fleet")
PLAYBOOK = ROOT / "playbooks" / "cutover.yml"
OUT = ROOT / "docs" / "benchmarks"


def used_mib():
    with open("/proc/meminfo") as f:
        info = dict((k, int(v.split()[0])) for k, v in (line.split(":", 1) for line in f))
    return (info["MemTotal"] - info["MemAvailable"]) / 1024.0


def main():
    before = used_mib()
    BED.up()
    try:
        for host in BED.hosts:
            BED.adhoc(host, LOAD)
        for host in BED.hosts:
            BED.wait_ready(host)
        serving = used_mib()
        fleet_wall, recap = BED.playbook(PLAYBOOK, ",".join(FLEET), "-e", "cutover_serial=4", "-f", "8")
        fleet_cpu = BED.last_cpu
        assert sorted(recap) == FLEET and all(c > 0 and f == 0 for c, f in recap.values()), recap
        print("fleet of %d in batches of 4: %.1f s" % (N, fleet_wall), flush=True)
        singles, cpus = [], []
        for host in SINGLES:
            wall, recap = BED.playbook(PLAYBOOK, host)
            assert recap[host][1] == 0
            singles.append(wall)
            cpus.append(BED.last_cpu)
            print("one host alone: %.1f s" % wall, flush=True)
        stats = sh(["podman", "stats", "--no-stream", "--format", "{{.Name}} {{.MemUsage}}"]).stdout
    finally:
        BED.down()
    single = statistics.median(singles)
    batches = (N + 3) // 4
    ratio = fleet_wall / (batches * single)
    per_container = (serving - before) / len(BED.hosts)
    cpu = statistics.median(cpus)
    header = ["hosts", "batches", "fleet wall (s)", "one host alone (s, median of 2)", "batches x one host (s)",
              "ratio", "controller CPU: fleet / one host (s)", "memory per host, serving (MiB)"]
    body = [[str(N), str(batches), "%.1f" % fleet_wall, "%.1f" % single, "%.1f" % (batches * single),
             "%.2f" % ratio, "%.0f / %.1f" % (fleet_cpu, cpu), "%.0f" % per_container]]
    title = "Fleet cutover: %d hosts, serial 4, against one host alone (stand-in server: %s s load + 1 s warm-up)" % (
        N, LOAD)
    table(title, header, body)
    OUT.mkdir(parents=True, exist_ok=True)
    with open(OUT / "fleet.md", "w") as f:
        f.write("# %s\n\nMeasured by `make bench-fleet` on %s, %d cores, over SSH with pipelining "
                "(forks 8).\n\n" % (title, time.strftime("%Y-%m-%d"), os.cpu_count()))
        f.write("| " + " | ".join(header) + " |\n|" + "---|" * len(header) + "\n")
        f.write("| " + " | ".join(body[0]) + " |\n\n")
        f.write("Memory: %.0f MiB used before, %.0f MiB with the %d hosts serving (all on one machine; one of them: %s).\n"
                % (before, serving, len(BED.hosts), (stats.splitlines() or ["? ?"])[0].split(" ", 1)[-1]))
        f.write("\nThe controller's CPU: ansible-playbook used %.0f s of CPU for the fleet, %.1f s for one host alone, on %d "
                "cores: at least %.0f s of the fleet's %.0f-s wall time is the controller's own work, which the load "
                "time L does not hide when L is this short.\n"
                % (fleet_cpu, cpu, os.cpu_count(), fleet_cpu / os.cpu_count(), fleet_wall))


if __name__ == "__main__":
    main()
