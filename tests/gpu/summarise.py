"""Turns run.sh's OUTDIR (run.json written by validate.yml, mode.txt) into a markdown summary."""
import json
import sys
from pathlib import Path


def main(outdir):
    out = Path(outdir)
    steps = json.loads(out.joinpath("run.json").read_text())
    res = dict((s["name"], s["result"]) for s in steps)
    print("| step | inside module s | changed | outcome |")
    print("| --- | --- | --- | --- |")
    for s in steps:
        r = s["result"]
        what = r.get("msg", "")
        if "count" in r:
            what = "count %d" % r["count"]
        if "holders" in r:
            what = "%d holders, %d targets, %d protected" % (len(r["holders"]), len(r["targets"]), len(r["protected"]))
        if "phases" in r:
            what += " (phases %s)" % r["phases"]
        print("| %s | %s | %s | %s |" % (s["name"], r.get("elapsed", ""), r.get("changed", ""),
                                         "FAILED: " + r.get("msg", "") if r.get("failed") else what or "not run"))
    q = res.get("gpu_release query", {})
    print("\nHolders before the stop (device files read from /proc/PID/fd):\n")
    for h in q.get("holders", []):
        print("- pid %s `%s`: %s" % (h["pid"], h["cmdline"][:90], ", ".join(h["devices"])))
    if q.get("before"):
        r = q["before"]
        print("\nnvidia-smi with the server up: memory.used %s MiB; compute apps %s" % (
            [g["memory_used_mib"] for g in r["gpus"]], [(a["pid"], a["name"], a["used_memory_mib"]) for a in r["compute_apps"]]))
    k = res.get("process_kill of the tree (mixed)", {})
    if k.get("targets"):
        print("\nStopped by process_kill:\n")
        for t in k["targets"]:
            print("- pid %s `%s`: sent %s, ended by %s" % (t["pid"], t["cmdline"][:70], t.get("signals"), t.get("ended_by")))
    rel = res.get("gpu_release released", {})
    for key in ("before", "after"):
        if key in rel:
            r = rel[key]
            print("\nnvidia-smi %s the release: memory.used %s MiB; compute apps %s" % (
                key, [g["memory_used_mib"] for g in r["gpus"]],
                [(a["pid"], a["used_memory_mib"]) for a in r["compute_apps"]] or "none"))
    if "memory_released_after" in rel:
        print("\nMemory of the released processes gone %.3f s after gpu_release started." % rel["memory_released_after"])
    fin = res.get("gpu_release query after", {})
    if fin.get("before"):
        print("\nFinal reading: memory.used %s MiB, compute apps %s" % (
            [g["memory_used_mib"] for g in fin["before"]["gpus"]], fin["before"]["compute_apps"] or "none"))
    print("\n" + out.joinpath("mode.txt").read_text())


if __name__ == "__main__":
    main(sys.argv[1])
