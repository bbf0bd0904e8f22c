"""Turns run.sh's OUTDIR (run.json written by validate.yml, the NCCL logs, mode.txt) into a markdown summary;
exits 1 when the NCCL part did not show what it should: `summarise.py OUTDIR MODE` (gpu or cpu)."""
import json
import re
import sys
from pathlib import Path

# what the pcie profile and the two debug variables set: NCCL logs reading the first four
PROFILE = {"NCCL_PROTO": "LL", "NCCL_ALGO": "Ring", "NCCL_P2P_LEVEL": "PHB", "NCCL_IB_DISABLE": "1"}
SET_BY_ENV = re.compile(r"NCCL INFO (NCCL_[A-Z0-9_]+) set by environment to (\S+?)\.?$")


def outcome(r):
    if not r:
        return "not run"
    if r.get("failed"):
        return "FAILED: " + r.get("msg", "")
    if "count" in r:
        return "count %d" % r["count"]
    if "holders" in r:
        return "%d holders, %d targets, %d protected" % (len(r["holders"]), len(r["targets"]), len(r["protected"]))
    if "status" in r:
        return "HTTP %s" % r["status"]
    return r.get("msg", "")


def apps(reading):
    return ", ".join("%s %s MiB" % (a["pid"], a["used_memory_mib"]) for a in reading["compute_apps"]) or "none"


def steps_table(res, steps):
    print("| step | inside module s | changed | outcome |")
    print("| --- | --- | --- | --- |")
    for s in steps:
        for r in s["result"].get("results", [s["result"]]):
            print("| %s | %s | %s | %s |" % (s["name"], r.get("elapsed", ""), r.get("changed", ""), outcome(r)))
    facts = res.get("facts", {})
    print("\nFamilies (sglang_discover): A %s, B %s; shared: %s. The untitled orphan: %s; B's scheduler: %s; "
          "the torch job: %s." % (facts.get("family_a"), facts.get("family_b"),
                                  sorted(set(facts.get("family_a", [])) & set(facts.get("family_b", []))) or "none",
                                  facts.get("orphan"), facts.get("scheduler_b"), facts.get("torch_pid")))
    print("\nChecks:\n")
    for name, ok in sorted(facts.get("checks", {}).items()):
        print("- %s: %s" % (name, "yes" if ok in (True, "True", "true") else "**NO**"))


def holders(res):
    q = res.get("gpu_release query", {})
    print("\nHolders of GPU 0 with everything up (device files read from /proc/PID/fd):\n")
    for h in q.get("holders", []):
        print("- pid %s (ppid %s) `%s`: %s" % (h["pid"], h.get("ppid"), h["cmdline"][:90], ", ".join(h["devices"])))
    for key, label in (("targets", "targets"), ("protected", "protected")):
        print("\n%s: %s" % (label, [(h["pid"], h["cmdline"][:40]) for h in q.get(key, [])]))
    if q.get("before"):
        print("\nnvidia-smi with everything up: memory.used %s MiB; compute apps (pid MiB): %s" % (
            [g["memory_used_mib"] for g in q["before"]["gpus"]], apps(q["before"])))


def stop(res):
    k = res.get("process_kill of A's tree (mixed)", {})
    if k.get("targets"):
        print("\nStopped by process_kill (A's pattern):\n")
        for t in k["targets"]:
            print("- pid %s `%s`: sent %s, ended by %s" % (t["pid"], t["cmdline"][:70], t.get("signals"), t.get("ended_by")))
    rel = res.get("gpu_release released (A's family on GPU 0)", {})
    for t in rel.get("released", []):
        print("\nReleased by gpu_release (A's family, GPU 0): pid %s `%s`, sent %s" % (t["pid"], t["cmdline"][:70], t.get("signals")))
    for key in ("before", "after"):
        if key in rel:
            print("\nnvidia-smi %s the release: memory.used %s MiB; compute apps (pid MiB): %s" % (
                key, [g["memory_used_mib"] for g in rel[key]["gpus"]], apps(rel[key])))
    if "memory" in rel:
        m = rel["memory"]
        print("\nMemory back %.3f s after the stop (%d nvidia-smi readings; the released processes unlisted after "
              "%s s), %.3f s after gpu_release started: %s" % (
                  m["waited"], m.get("readings", 0), m.get("unlisted"), rel["memory_released_after"], m["gpus"]))
    fin = res.get("gpu_release query after", {})
    if fin:
        print("\nRight after: targets (a cutover of A would call them strays) %s; protected %s" % (
            [(h["pid"], h["cmdline"][:40]) for h in fin.get("targets", [])],
            [(h["pid"], h["cmdline"][:40]) for h in fin.get("protected", [])]))
    if fin.get("before"):
        print("\nnvidia-smi right after: memory.used %s MiB; compute apps (pid MiB): %s" % (
            [g["memory_used_mib"] for g in fin["before"]["gpus"]], apps(fin["before"])))
    facts = res.get("facts", {})
    if facts.get("held_a_mib") is not None:
        print("\nA's family held %s MiB (nvidia-smi per process); memory.used dropped by %s MiB." % (
            facts["held_a_mib"], facts["dropped_mib"]))


def nccl(out, mode):
    """The NCCL lines: which variables NCCL read from the environment, per process; False when wrong."""
    ok = True
    for state in ("present", "absent"):
        want = dict(PROFILE) if state == "present" else {}
        print("\n### NCCL with nccl_env_state: %s\n" % state)
        logs = [out / ("nccl-probe-%s.log" % state)]
        if state == "present":
            logs += sorted(out.glob("sglang-*.log"))
        for log in logs:
            if not log.exists():
                print("- %s: missing" % log.name)
                ok = False
                continue
            lines = log.read_text(errors="replace").splitlines()
            read = {}
            for line in lines:
                m = SET_BY_ENV.search(line)
                if m:
                    read.setdefault(line.split(" ")[0], {})[m.group(1)] = m.group(2)
            shown = [line for line in lines
                     if SET_BY_ENV.search(line) or " sees {" in line or "all-reduce" in line or "NCCL version" in line or " - Init " in line]
            print("%s:\n\n```\n%s\n```\n" % (log.name, "\n".join(shown) or "(no NCCL line, no rank output)"))
            if mode == "gpu":
                reduced = [line for line in lines if "all-reduce over" in line]
                seen = dict((k, v) for r in read.values() for k, v in r.items() if k in PROFILE)
                logged = any("NCCL_NVLS_ENABLE" in r for r in read.values())  # set by run.sh: NCCL's log was on
                if not reduced or not logged or bool(seen) != bool(want) or any(want.get(k) != v for k, v in seen.items()):
                    print("**unexpected**: want an all-reduce and %s\n" % (
                        "the profile's values read by NCCL" if want else "none of the profile's variables read"))
                    ok = False
            elif log.name.startswith("nccl-probe"):
                sees = [json.loads(line.split(" sees ", 1)[1]) for line in lines if " sees {" in line]
                if not sees or any(dict((k, s[k]) for k in PROFILE if s.get(k)) != want for s in sees):
                    print("**unexpected**: want %s in the spawned rank's environment\n" % (want or "none"))
                    ok = False
    return ok


def main(outdir, mode):
    out = Path(outdir)
    steps = json.loads(out.joinpath("run.json").read_text())
    res = dict((s["name"], s["result"]) for s in steps)
    print("## The shared host\n")
    steps_table(res, steps)
    holders(res)
    stop(res)
    print("\n## NCCL through the venv's .pth")
    ok = nccl(out, mode)
    print("\n## Run\n\n" + out.joinpath("mode.txt").read_text())
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
