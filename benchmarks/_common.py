"""Shared by the benchmarks: run a playbook against localhost, start the SGLang double on loopback."""
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOUBLE = ROOT / "tests" / "sglang_double"
PY = sys.executable


def env():
    e = dict(os.environ)
    e.update(ANSIBLE_COLLECTIONS_PATH=str(ROOT / ".cache" / "collections"), ANSIBLE_NOCOLOR="1",
             ANSIBLE_LOCALHOST_WARNING="0", ANSIBLE_INVENTORY_UNPARSED_WARNING="0", ANSIBLE_STDOUT_CALLBACK="json")
    return e


def playbook(tasks, extra=None):
    """Run the tasks against localhost; returns the json callback's result of each task."""
    play = [{"hosts": "localhost", "gather_facts": False, "connection": "local",
             "vars": {"ansible_python_interpreter": PY}, "tasks": tasks}]
    with tempfile.NamedTemporaryFile("w", suffix=".yml", delete=False) as f:
        json.dump(play, f)
    try:
        out = subprocess.run([str(Path(PY).parent / "ansible-playbook"), f.name] + (extra or []), env=env(),
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True, check=False)
    finally:
        os.unlink(f.name)
    data = json.loads(out.stdout)
    return [t["hosts"]["localhost"] for p in data["plays"] for t in p["tasks"]], out.returncode


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Double:
    def __init__(self, tmp, **knobs):
        self.port = free_port()
        self.state = Path(tmp) / ("state-%d.jsonl" % self.port)
        e = dict(os.environ, PYTHONPATH=str(DOUBLE), SGLANG_DOUBLE_STATE_FILE=str(self.state))
        e.update({"SGLANG_DOUBLE_" + k.upper(): str(v) for k, v in knobs.items()})
        self.proc = subprocess.Popen([PY, "-m", "sglang.launch_server", "--model-path", "/models/bench", "--tp", "1",
                                      "--port", str(self.port)], env=e, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def event(self, name):
        for line in self.state.read_text().splitlines():
            rec = json.loads(line)
            if rec["event"] == name:
                return rec["time"]
        return None

    def stop(self):
        self.proc.kill()
        self.proc.wait()


def table(title, header, rows):
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows)]

    def line(r):
        return "| " + " | ".join(str(x).ljust(w) for x, w in zip(r, widths)) + " |"
    print("\n" + title)
    print(line(header))
    print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    for r in rows:
        print(line(r))


def page(out, name, title, header, body, lines, after=""):
    """Print the lines; write out/NAME.md: the title, the date, the table, the lines, the chart out/NAME.png, then
    the markdown `after`."""
    print("\n".join(lines))
    out.mkdir(parents=True, exist_ok=True)
    with open(out / (name + ".md"), "w") as f:
        f.write("# %s\n\n" % title)
        f.write("Measured by `make bench-%s` on %s.\n\n" % (name, time.strftime("%Y-%m-%d")))
        f.write("| " + " | ".join(header) + " |\n|" + "---|" * len(header) + "\n")
        for row in body:
            f.write("| " + " | ".join(row) + " |\n")
        f.write("\n" + "\n".join("- " + line for line in lines) + "\n\n![chart](%s.png)\n" % name)
        if after:
            f.write("\n" + after)


def median(xs):
    return statistics.median(xs) if xs else float("nan")


def now():
    return time.time()
