"""Asks the server on port 30000 for its models every 50 ms until SIGTERM; the counts go to /root/probe.json: each
failure with when its request began and how long it took, and the slowest requests (wall-clock start, seconds)."""
import json
import os
import signal
import sys
import time
import urllib.request

counts = {"ok": 0, "failed": 0, "errors": [], "slowest": []}


def save(*_):
    with open("/root/probe.json.tmp", "w") as f:
        json.dump(counts, f)
    os.replace("/root/probe.json.tmp", "/root/probe.json")
    if _:
        sys.exit(0)


signal.signal(signal.SIGTERM, save)
while True:
    began, t0 = time.time(), time.monotonic()
    try:
        with urllib.request.urlopen("http://127.0.0.1:30000/v1/models", timeout=5) as r:
            ok = r.status == 200
            why = "status %d" % r.status
    except Exception as e:  # pylint: disable=broad-except
        ok, why = False, str(e)
    took = round(time.monotonic() - t0, 3)
    if not ok:
        counts["errors"] = (counts["errors"] + ["began %.3f, %.3f s: %s" % (began, took, why)])[-20:]
    counts["slowest"] = sorted(counts["slowest"] + [[took, round(began, 3)]], reverse=True)[:5]
    counts["ok" if ok else "failed"] += 1
    save()
    time.sleep(0.05)
