"""The weights suite's readings (weights.sh), standard library only; the same code reads the SGLang double on a CPU.

  weights.py stamp FILE
      Copies stdin to FILE, each line prefixed with its arrival (epoch seconds and a tab): a hand-launched server's
      log with times as precise as the journal's.
  weights.py watch FILE UNIT...
      `systemctl show` of the units every 0.2 s, a JSON line (with "unit") at each change of one, until killed or
      until its parent is gone (it never outlives the shell or nsenter that started it). Run it where the units'
      systemd is (inside the namespace): a systemctl that reads no state is written as an "error" line, never as a
      row without state.
  weights.py backs FILE SINCE UNIT...
      From a watch file, per unit after SINCE (epoch): when it left active, its results, each time it became active
      again (a leave of active and a return, or a new ActiveEnterTimestamp: a crash loop shows as several), whether
      it left active again after its first return, its MainPIDs, NRestarts, how many rows held a state, the errors.
  weights.py once FILE SINCE SERVER DAEMON N0 N1
      The kill step's verdict from the watch file: each unit active again exactly once after SINCE and not left
      since, the daemon's NRestarts N0 -> N1 exactly one more (its Restart=; the server's unit is restarted by
      systemd as a job of its Requires=, its own NRestarts unchanged under systemd 252), the server's MainPID new.
  weights.py phases LOG SINCE [--probes FILE] [--unit UNIT]
      Where a start's time went, from SGLang's own log lines in LOG (`journalctl -o json` lines, or a stamped log):
      the old engine's stop, the launcher's imports, the scheduler's start, the weight load (SGLang's own
      `elapsed=` too, and `Zero-copy: mapped N tensors`), the KV pool, the port, the warm-up, the first /health 200.
  weights.py gpu
      GPU memory per process (nvidia-smi, run outside any pid namespace: its pids are the host's), each with its
      systemd unit (from /proc/PID/cgroup) and its title; and the total used.
  weights.py files UNIT
      The 0.5.17 daemon's socket and ready files: in the unit's private /tmp (/tmp/systemd-private-*-UNIT-*/tmp),
      and whether any is in the shared /tmp, where another user could have made it first.
  weights.py generate PORT
      One greedy generation of 8 tokens: {"status", "seconds", "text"}.
  weights.py summary [--md FILE] JSON...
      The done-when checks and the restart figures from one or more weights.json (a second call's results complete
      the first's), with what they mean for a 547 GB model at a disk's speed.
Times are epoch seconds (time.time()), so that the shell's $EPOCHREALTIME marks compare with them.
"""
import argparse
import glob
import json
import os
import re
import subprocess
import sys
import time
import urllib.error
import urllib.request

SOCKET_NAMES = ("sglang_weight_cache_rank0.sock", "sglang_weight_cache_rank0.ready")  # 0.5.17 protocol.py, rank 0
SEEDS_MODEL_GB = 547.0  # the seeds' model (issue 47)
DISK_GBPS = (1.0, 2.0, 3.5, 7.0)  # a SATA/NFS-ish read, a datacenter NVMe, a fast NVMe, a PCIe 5 NVMe


# --- logs ---------------------------------------------------------------------------------------
def stamp(a):
    with open(a.file, "a") as f:
        for line in sys.stdin:
            f.write("%.6f\t%s" % (time.time(), line if line.endswith("\n") else line + "\n"))
            f.flush()
    return 0


def read_log(path):
    """[(epoch, text)] of a `journalctl -o json` file or a stamped log."""
    out = []
    with open(path, errors="replace") as f:
        for line in f:
            line = line.rstrip("\n")
            if not line:
                continue
            if line.startswith("{"):
                try:
                    e = json.loads(line)
                except ValueError:
                    continue
                msg = e.get("MESSAGE", "")
                if isinstance(msg, list):  # journald's bytes for a message that is not UTF-8
                    msg = bytes(msg).decode("utf-8", "replace")
                out.append((int(e.get("__REALTIME_TIMESTAMP", 0)) / 1e6, msg or ""))
            elif "\t" in line:
                t, text = line.split("\t", 1)
                try:
                    out.append((float(t), text))
                except ValueError:
                    continue
    return out


MARKS = (  # (name, pattern): the first line after the start of each
    ("stopping", re.compile(r"^Stopping ")),
    ("stopped", re.compile(r"(Deactivated successfully|^Stopped |Failed with result|Main process exited)")),
    ("starting", re.compile(r"^Starting ")),
    ("server_args", re.compile(r"server_args=ServerArgs\(")),
    ("load_begin", re.compile(r"Load weight begin")),
    ("zero_copy", re.compile(r"Zero-copy: mapped (\d+) tensors.*time=([0-9.]+)s")),
    ("load_end", re.compile(r"Load weight end\. elapsed=([0-9.]+) s")),
    ("kv_pool", re.compile(r"max_total_num_tokens=")),
    ("port_open", re.compile(r"(Uvicorn running on|Application startup complete)")),
    ("fired_up", re.compile(r"The server is fired up and ready to roll")),
    ("started", re.compile(r"^Started ")),
    ("refused", re.compile(r"(refused the connection|Connection refused|Daemon config mismatch)")),
)


def phases_of(lines, since, probes=None, show=None):
    """The marks' times (seconds after since) and the phases between them."""
    marks, values = {}, {}
    for t, text in lines:
        if t < since:
            continue
        for name, pat in MARKS:
            if name in marks:
                continue
            if name in ("starting", "server_args") and "stopping" in marks and "stopped" not in marks:
                continue  # the old engine's lines while it stops
            m = pat.search(text)
            if m:
                marks[name] = round(t - since, 3)
                if name == "load_end":
                    values["sglang_weight_load_s"] = float(m.group(1))
                if name == "zero_copy":
                    values["zero_copy_tensors"], values["zero_copy_map_s"] = int(m.group(1)), float(m.group(2))
    if show:  # systemd's own times of the unit's last start (epoch seconds)
        for key, name in (("InactiveEnterTimestamp", "inactive"), ("ExecMainStartTimestamp", "main_start"),
                          ("ActiveEnterTimestamp", "active")):
            t = show.get(key)
            if t and t >= since:
                marks[name] = round(t - since, 3)
    if probes:
        down = [t for t, code in probes if t >= since and code != 200]
        up = [t for t, code in probes if t >= since and code == 200 and (not down or t > down[0])]
        before = [t for t, code in probes if t < (down[0] if down else since) and code == 200]
        if down and up:
            marks["first_200"] = round(up[0] - since, 3)
            values["gap_s"] = round(up[0] - (before[-1] if before else since), 3)

    def span(a, b):
        return round(marks[b] - marks[a], 3) if a in marks and b in marks and marks[b] >= marks[a] else None

    stop_end = "inactive" if "inactive" in marks else "stopped"
    start = "main_start" if "main_start" in marks else "starting"
    values["phases"] = {
        "old_engine_stop_s": span("stopping", stop_end) if "stopping" in marks else None,
        "to_main_process_s": span(stop_end, start) if "stopping" in marks else None,  # ExecStartPre, RestartSec
        "launcher_imports_s": span(start, "server_args"),
        "scheduler_start_s": span("server_args", "load_begin"),  # its imports, torch.distributed
        "weight_load_s": span("load_begin", "load_end"),
        "kv_pool_s": span("load_end", "kv_pool"),
        "to_port_s": span("kv_pool", "port_open"),
        "warm_up_s": span("port_open", "fired_up"),
        "to_first_200_s": span("fired_up", "first_200"),
    }
    values["marks"] = marks
    return values


def read_probes(path):
    out = []
    with open(path) as f:
        for line in f:
            bits = line.split()
            if len(bits) == 2:
                out.append((float(bits[0]), int(bits[1])))
    return out


def unit_times(unit):
    """{property: epoch} of the unit's start and stop timestamps (`systemctl show --timestamp=us+utc`)."""
    keys = ("InactiveEnterTimestamp", "ExecMainStartTimestamp", "ActiveEnterTimestamp", "InactiveExitTimestamp")
    out = subprocess.run(["systemctl", "show", "--timestamp=us+utc", unit] + ["-p" + k for k in keys],
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, universal_newlines=True, check=False).stdout
    return {k: v for k, v in ((k, utc_epoch(v)) for k, v in (l.split("=", 1) for l in out.splitlines() if "=" in l))
            if v is not None}


def utc_epoch(text):
    """'Sat 2026-12-06 12:00:00.123456 UTC' -> epoch seconds (None when empty or otherwise)."""
    m = re.search(r"(\d{4})-(\d\d)-(\d\d) (\d\d):(\d\d):(\d\d)(?:\.(\d+))? UTC", text or "")
    if not m:
        return None
    import calendar  # pylint: disable=import-outside-toplevel

    whole = calendar.timegm(tuple(int(x) for x in m.groups()[:6]))
    return whole + (float("0." + m.group(7)) if m.group(7) else 0.0)


def phases(a):
    show = unit_times(a.unit) if a.unit else None
    print(json.dumps(phases_of(read_log(a.log), a.since, read_probes(a.probes) if a.probes else None, show)))
    return 0


# --- systemd --------------------------------------------------------------------------------------
WATCHED = ("ActiveState", "SubState", "Result", "NRestarts", "MainPID", "ActiveEnterTimestampMonotonic")


def read_state(unit):
    """(state, error): systemctl show's properties of the unit, or why they could not be read (a systemctl with no
    systemd to ask prints nothing: outside the namespace, the machine has none)."""
    try:
        p = subprocess.run(["systemctl", "show", unit] + ["-p" + w for w in WATCHED], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, universal_newlines=True, check=False, timeout=10)
    except (OSError, subprocess.SubprocessError) as e:
        return None, "systemctl show %s: %s" % (unit, e)
    state = dict(line.split("=", 1) for line in p.stdout.splitlines() if "=" in line)
    if p.returncode != 0 or not state.get("ActiveState"):
        said = (p.stderr.strip() or p.stdout.strip())[:200]
        return None, "systemctl show %s: rc %d, no ActiveState: %s" % (unit, p.returncode, said)
    return state, None


def die_with_parent():
    """SIGTERM when the parent (the shell, or the nsenter that entered the namespace) is gone: a watch never outlives
    who started it (from inside a pid namespace its parent outside reads as 0, before and after it is gone)."""
    try:
        import ctypes  # pylint: disable=import-outside-toplevel

        ctypes.CDLL(None, use_errno=True).prctl(1, 15, 0, 0, 0)  # PR_SET_PDEATHSIG, SIGTERM
    except (OSError, AttributeError):
        pass


def watch(a):
    before, parent = {}, os.getppid()
    die_with_parent()
    with open(a.file, "a") as f:
        while os.getppid() == parent:  # orphaned: the shell or nsenter that started it is gone
            for unit in a.units:
                state, error = read_state(unit)
                now = state if state is not None else {"error": error}
                if now != before.get(unit):
                    f.write(json.dumps(dict(now, unit=unit, t=round(time.time(), 3))) + "\n")
                    f.flush()
                    before[unit] = now
            time.sleep(0.2)
    return 0


def backs_of(rows, since, unit):
    out = {"left_active": None, "results": [], "active_again": [], "left_again": [], "main_pids": [],
           "n_restarts": None, "states": [], "read": 0, "errors": []}
    was_active, entered = None, None
    for r in rows:
        if r.get("unit") != unit:
            continue
        if "error" in r or not r.get("ActiveState"):  # nothing read: neither a state nor a change of one
            if r["t"] >= since and (r.get("error") or "no state") not in out["errors"]:
                out["errors"].append(r.get("error") or "a row without ActiveState")
            continue
        active = r.get("ActiveState") == "active"
        enter = r.get("ActiveEnterTimestampMonotonic")
        if r["t"] >= since:
            out["read"] += 1
            out["states"].append("%.1f %s/%s %s %s %s" % (r["t"] - since, r.get("ActiveState"), r.get("SubState"),
                                                          r.get("Result"), r.get("NRestarts"), r.get("MainPID")))
            if out["left_active"] is None and not active:
                out["left_active"] = round(r["t"] - since, 3)
            if not active and was_active and out["active_again"]:
                out["left_again"].append(round(r["t"] - since, 3))  # left active after it came back: a loop
            if r.get("Result") not in (None, "success") and r.get("Result") not in out["results"]:
                out["results"].append(r.get("Result"))
            # an activation: from a state that was not active, or a new ActiveEnterTimestamp (a return between two
            # polls of the watch, the inactive spell unseen)
            if active and (was_active is False or (enter not in (None, "0") and entered is not None
                                                   and enter != entered)):
                out["active_again"].append(round(r["t"] - since, 3))
            if active and r.get("MainPID") not in (None, "0") and r.get("MainPID") not in out["main_pids"]:
                out["main_pids"].append(r.get("MainPID"))
            out["n_restarts"] = r.get("NRestarts")
        was_active = active
        if enter not in (None, "0"):
            entered = enter
    return out


def backs(a):
    with open(a.file) as f:
        rows = [json.loads(line) for line in f if line.strip()]
    print(json.dumps({u: backs_of(rows, a.since, u) for u in a.units}))
    return 0


def once_of(rows, since, server, daemon, n0, n1):
    """The kill step's verdict: {"ok", "why": [what failed], and the backs of both units}."""
    b = {u: backs_of(rows, since, u) for u in (server, daemon)}
    why = []
    for u, name in ((daemon, "daemon"), (server, "server")):
        v = b[u]
        if not v["read"]:
            why.append("the watch read no state of the %s's unit after the kill (%s)" % (
                name, "; ".join(v["errors"]) or "no row"))
            continue
        if len(v["active_again"]) != 1:
            why.append("the %s's unit became active %d times (at %s), not once" % (
                name, len(v["active_again"]), v["active_again"]))
        if v["left_again"]:
            why.append("the %s's unit left active again after it came back (at %s)" % (name, v["left_again"]))
        if v["errors"]:
            why.append("the watch could not read the %s's unit: %s" % (name, "; ".join(v["errors"])))
    try:
        more = int(n1) - int(n0)
    except (TypeError, ValueError):
        more = None
    if more != 1:
        why.append("the daemon's NRestarts %s -> %s: not one restart" % (n0, n1))
    return {"ok": not why, "why": why, "backs": b}


def once(a):
    with open(a.file) as f:
        rows = [json.loads(line) for line in f if line.strip()]
    v = once_of(rows, a.since, a.server, a.daemon, a.n0, a.n1)
    print(json.dumps(v))
    return 0 if v["ok"] else 1


# --- the GPU and the daemon's files -------------------------------------------------------------------
def unit_of(pid):
    try:
        with open("/proc/%d/cgroup" % pid) as f:
            path = f.read().strip().split(":")[-1]
    except OSError:
        return None
    units = [p for p in path.split("/") if p.endswith((".service", ".scope"))]
    return units[-1] if units else path


def title_of(pid):
    try:
        with open("/proc/%d/cmdline" % pid, "rb") as f:
            return f.read().replace(b"\0", b" ").decode("utf-8", "replace").strip()[:160]
    except OSError:
        return None


def gpu_reading():
    procs, total = [], None
    try:
        out = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"],
                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, universal_newlines=True,
                             timeout=20, check=False).stdout
        for line in out.splitlines():
            bits = [b.strip() for b in line.split(",")]
            if len(bits) == 2 and bits[0].isdigit():
                pid = int(bits[0])
                procs.append({"pid": pid, "mib": int(bits[1]) if bits[1].isdigit() else None, "unit": unit_of(pid),
                              "title": title_of(pid)})
        used = subprocess.run(["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits"],
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, universal_newlines=True,
                              timeout=20, check=False).stdout.split()
        total = sum(int(u) for u in used if u.isdigit())
    except (OSError, subprocess.SubprocessError):
        pass
    by_unit = {}
    for p in procs:
        by_unit[p["unit"] or "?"] = by_unit.get(p["unit"] or "?", 0) + (p["mib"] or 0)
    return {"t": round(time.time(), 3), "used_mib": total, "processes": procs, "by_unit_mib": by_unit}


def gpu(a):  # pylint: disable=unused-argument
    print(json.dumps(gpu_reading()))
    return 0


def files(a):
    private = sorted(glob.glob("/tmp/systemd-private-*-%s-*/tmp" % glob.escape(a.unit)))
    out = {"private_tmp": private, "private": {}, "shared": {}}
    for name in SOCKET_NAMES:
        for d in private:
            p = os.path.join(d, name)
            if os.path.lexists(p):
                st = os.lstat(p)
                out["private"][name] = {"path": p, "mode": oct(st.st_mode & 0o7777), "uid": st.st_uid,
                                        "mtime": round(st.st_mtime, 3)}
                if name.endswith(".ready"):
                    try:
                        with open(p) as f:
                            out["private"][name]["pid"] = f.readline().strip()
                    except OSError:
                        pass
        shared = os.path.join("/tmp", name)
        out["shared"][name] = os.path.lexists(shared)
    print(json.dumps(out))
    return 0


def generate(a):
    params = {"max_new_tokens": 8, "temperature": 0.0}
    body = json.dumps({"text": "The capital city of France is", "sampling_params": params}).encode()
    req = urllib.request.Request("http://127.0.0.1:%d/generate" % a.port, data=body,
                                 headers={"Content-Type": "application/json"})
    t = time.time()
    try:
        with urllib.request.urlopen(req, timeout=a.timeout) as r:
            status, text = r.status, json.loads(r.read().decode()).get("text")
    except urllib.error.HTTPError as e:
        status, text = e.code, None
    except (OSError, ValueError):
        status, text = 0, None
    print(json.dumps({"status": status, "seconds": round(time.time() - t, 3), "text": text}))
    return 0 if status == 200 else 1


# --- the summary: the done-when and the paper arithmetic ------------------------------------------------
def merged(paths):
    checks, values = {}, {}
    for p in paths:
        with open(p) as f:
            r = json.load(f)
        for k, v in r.items():
            if k == "values":
                values.update(v)
            elif isinstance(v, dict) and "ok" in v:
                if k not in checks or v["ok"]:  # a later call's pass completes an earlier call's left-out step
                    checks[k] = v
    return checks, values


def get(values, *path):
    v = values
    for k in path:
        v = v.get(k) if isinstance(v, dict) else None
    return v


def paper(values):
    """What the measured figures mean for the seeds' 547 GB model (issue 47): a restart without the cache pays the
    read of the whole model each time; with it, the start without the read (what a restart with the cache measured)."""
    gb = (values.get("model_bytes") or 16.06e9) / 1e9
    cold_load = get(values, "nocache_restart_cold", "sglang_weight_load_s") or get(values, "cold", "sglang_weight_load_s")
    with_gap = get(values, "restart", "gap_s")
    warm_gap = get(values, "nocache_restart_warm", "gap_s")
    warm_load = get(values, "nocache_restart_warm", "sglang_weight_load_s")
    base = (warm_gap - warm_load) if warm_gap is not None and warm_load is not None else None
    rows = []
    speeds = list(DISK_GBPS)
    if cold_load:
        speeds.append(round(gb / cold_load, 2))  # the read rate this machine's cold load showed
    for s in speeds:
        read = SEEDS_MODEL_GB / s
        rows.append({"disk_gbps": s, "read_s": round(read, 1),
                     # the start without the read is measured (a no-cache restart), never assumed
                     "restart_without_cache_s": round(base + read, 1) if base is not None else None,
                     "restart_with_cache_s": with_gap, "measured_here": cold_load is not None and s == speeds[-1]})
    return {"model_gb": SEEDS_MODEL_GB, "measured_model_gb": round(gb, 2), "start_without_read_s": base,
            "restart_with_cache_gap_s": with_gap, "cold_read_gbps_here": round(gb / cold_load, 2) if cold_load else None,
            "rows": rows,
            "note": "the daemon pays the read once per boot or model change (the read column); the GPUs hold the "
                    "weights once, in the daemon (547 GB over 8 GPUs: ~68 GB each), a client adds its KV pool only"}


def summary(a):
    checks, values = merged(a.files)
    done = {}
    load = get(values, "restart", "sglang_weight_load_s")
    gap = get(values, "restart", "gap_s")
    warm_gap = get(values, "nocache_restart_warm", "gap_s")
    warm_load = get(values, "nocache_restart_warm", "sglang_weight_load_s")
    done["restart_weight_load_under_1s"] = None if load is None else load < 1.0
    if None not in (gap, warm_gap, warm_load):
        done["restart_gap_within_start_without_read_plus_1s"] = gap <= warm_gap - warm_load + 1.0
    else:
        done["restart_gap_within_start_without_read_plus_1s"] = None
    for k in ("flag_change_keeps_daemon", "bad_flag_rolled_back", "daemon_killed_both_back_once"):
        done[k] = checks[k]["ok"] if k in checks else None
    out = {"done_when": done, "checks": {k: v["ok"] for k, v in sorted(checks.items())}, "paper": paper(values)}
    print(json.dumps(out, indent=1))
    if a.md:
        write_md(a.md, out, values)
    return 0 if all(v for v in done.values()) else 1


def fmt(v, unit=" s"):
    return "-" if v is None else ("%.2f%s" % (v, unit) if isinstance(v, float) else "%s%s" % (v, unit))


def write_md(path, out, values):
    lines = ["# Restarts with the weights kept: SGLang 0.5.17's weight cache daemon on a real GPU", "",
             "Written by `weights.py summary` from `tests/gpu/real/results/*/weights*.json` (`make bench-restart`).",
             "", "## Done when", "", "| check | result |", "| --- | --- |"]
    for k, v in out["done_when"].items():
        lines.append("| %s | %s |" % (k, {True: "passed", False: "FAILED", None: "not measured"}[v]))
    lines += ["", "## Restarts", "",
              "| restart | gap without a /health 200 | SGLang's weight load | old engine's stop | launcher imports | "
              "scheduler start | KV pool | warm-up |", "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for key, name in (("restart", "systemctl restart, weight cache"), ("flag", "flag change (cutover), weight cache"),
                      ("nocache_restart_warm", "systemctl restart, no cache, warm page cache"),
                      ("nocache_restart_cold", "systemctl restart, no cache, cold page cache"),
                      ("nocache_flag", "flag change (cutover), no cache"),
                      ("cold", "cold hand launch (no cache)")):
        v = values.get(key) or {}
        ph = v.get("phases") or {}
        lines.append("| %s | %s | %s | %s | %s | %s | %s | %s |" % (
            name, fmt(v.get("gap_s")), fmt(v.get("sglang_weight_load_s")), fmt(ph.get("old_engine_stop_s")),
            fmt(ph.get("launcher_imports_s")), fmt(ph.get("scheduler_start_s")), fmt(ph.get("kv_pool_s")),
            fmt(ph.get("warm_up_s"))))
    lines += ["", "## GPU memory (MiB, nvidia-smi per unit)", ""]
    for k in sorted(values):
        if k.startswith("gpu_"):
            lines.append("- %s: %s (total %s)" % (k[4:], json.dumps(values[k].get("by_unit_mib")),
                                                  values[k].get("used_mib")))
    p = out["paper"]
    lines += ["", "## On paper: the seeds' %.0f GB model" % p["model_gb"], "",
              "Start without the read (a no-cache restart's gap minus its weight load): %s; the read rate of this "
              "machine's cold load: %s GB/s." % (fmt(p["start_without_read_s"]), fmt(p["cold_read_gbps_here"], "")), "",
              "| disk GB/s | the read | a restart without the cache | a restart with it |", "| --- | --- | --- | --- |"]
    for r in p["rows"]:
        lines.append("| %s%s | %s | %s | %s |" % (r["disk_gbps"], " (here)" if r["measured_here"] else "",
                                                  fmt(r["read_s"]), fmt(r["restart_without_cache_s"]),
                                                  fmt(r["restart_with_cache_s"])))
    lines += ["", p["note"] + ".", ""]
    with open(path, "w") as f:
        f.write("\n".join(lines))


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    sub = p.add_subparsers(dest="cmd")
    s = sub.add_parser("stamp")
    s.add_argument("file")
    w = sub.add_parser("watch")
    w.add_argument("file")
    w.add_argument("units", nargs="+")
    b = sub.add_parser("backs")
    b.add_argument("file")
    b.add_argument("since", type=float)
    b.add_argument("units", nargs="+")
    o = sub.add_parser("once")
    o.add_argument("file")
    o.add_argument("since", type=float)
    o.add_argument("server")
    o.add_argument("daemon")
    o.add_argument("n0")
    o.add_argument("n1")
    ph = sub.add_parser("phases")
    ph.add_argument("log")
    ph.add_argument("since", type=float)
    ph.add_argument("--probes")
    ph.add_argument("--unit", help="the unit whose last start it was: systemd's own times of it too")
    sub.add_parser("gpu")
    fl = sub.add_parser("files")
    fl.add_argument("unit")
    g = sub.add_parser("generate")
    g.add_argument("port", type=int)
    g.add_argument("--timeout", type=float, default=60.0)
    sm = sub.add_parser("summary")
    sm.add_argument("--md")
    sm.add_argument("files", nargs="+")
    a = p.parse_args(argv)
    run = {"stamp": stamp, "watch": watch, "backs": backs, "once": once, "phases": phases, "gpu": gpu, "files": files,
           "generate": generate, "summary": summary}.get(a.cmd)
    if run is None:
        p.error("a command: stamp, watch, backs, once, phases, gpu, files, generate, summary")
    return run(a)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
