"""Steady client traffic through the balancer while the fleet is cut over.

    python client.py URL LOG STOPFILE [THREADS]

Each thread sends short /generate requests one after another until STOPFILE exists; every answer (or
error) goes to LOG as a JSON line: start, end, status, backend.
"""
import json
import os
import sys
import threading
import time
import urllib.error
import urllib.request


def worker(url, out, lock, stop):
    body = json.dumps({"text": "fleet", "sampling_params": {"max_new_tokens": 8}}).encode()
    while not os.path.exists(stop):
        start = time.time()
        backend = None
        try:
            req = urllib.request.Request(url + "/generate", data=body, headers={"Content-Type": "application/json"})
            with urllib.request.urlopen(req, timeout=60) as r:
                r.read()
                status, backend = r.status, r.headers.get("X-Backend")
        except urllib.error.HTTPError as e:
            status, backend = e.code, e.headers.get("X-Backend")
        except OSError as e:
            status = "error: %s" % e
        with lock:
            out.write(json.dumps({"start": start, "end": time.time(), "status": status, "backend": backend}) + "\n")
        time.sleep(0.05)


def main():
    url, log, stop = sys.argv[1], sys.argv[2], sys.argv[3]
    threads = int(sys.argv[4]) if len(sys.argv) > 4 else 3
    out = open(log, "a", buffering=1)
    lock = threading.Lock()
    ts = [threading.Thread(target=worker, args=(url, out, lock, stop)) for dummy in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()


if __name__ == "__main__":
    main()
