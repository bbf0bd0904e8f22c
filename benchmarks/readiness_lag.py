"""How long after the server turns ready does the playbook know it?

model_wait vs the stock `ansible.builtin.uri` until-loop (retries, delay 5) on /health, against the
SGLang double on loopback, which records the instant it turns ready. Goal: model_wait <= 0.25 s median.
Usage: make bench-readiness   (RUNS=5 by default)
"""
import os
import tempfile

from _common import Double, median, playbook, table

RUNS = int(os.environ.get("RUNS", "5"))
MARK = {"name": "mark", "ansible.builtin.set_fact": {"seen_at": "{{ lookup('pipe', 'date +%s.%N') }}"}}


def waiters(port):
    url = "http://127.0.0.1:%d" % port
    return {
        "model_wait": {"inferops.sglang.model_wait": {"url": url, "timeout": 120}},
        "uri until-loop (delay 5)": {"ansible.builtin.uri": {"url": url + "/health", "status_code": 200},
                                     "register": "r", "until": "r.status == 200", "retries": 60, "delay": 5},
    }


def main():
    rows, lags = [], {}
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(RUNS):
            load = 3 + 0.7 * i  # a different phase against the 5 s loop each run
            for name in ("model_wait", "uri until-loop (delay 5)"):
                d = Double(tmp, load_seconds=load, warmup_seconds=0.5, health_seconds=1)
                try:
                    results, rc = playbook([dict(waiters(d.port)[name], name="wait"), MARK])
                    assert rc == 0, results
                    seen = float(results[-1]["ansible_facts"]["seen_at"])
                    lag = seen - d.event("ready")
                finally:
                    d.stop()
                lags.setdefault(name, []).append(lag)
                rows.append((i + 1, "%.1f" % load, name, "%.3f" % lag))
    table("Readiness detection lag per run (seconds after the server turned ready)",
          ["run", "load s", "waiter", "lag s"], rows)
    table("Median lag", ["waiter", "median s", "max s", "goal"],
          [(n, "%.3f" % median(v), "%.3f" % max(v), "<= 0.25" if n == "model_wait" else "")
           for n, v in lags.items()])


if __name__ == "__main__":
    main()
