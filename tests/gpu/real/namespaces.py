"""The systemd namespaces the suites start (lib.sh's systemd_boot), recorded, found and ended; standard library only.

The device machine keeps a process that started its own session (setsid) after a call returns, so a namespace of an
earlier call can still run, its units serving, when the next call begins; and the units an earlier call installed
stay in the machine's /etc/systemd/system (the namespace shares the machine's file systems), enabled: a new
namespace's boot starts them again, with the earlier call's WORK. Before a suite boots its own namespace, run.sh
(`namespaces.py end`) ends what an earlier run left and removes what it installed, then waits for the GPUs' memory.

  namespaces.py record NS_PID OWNER_PID
      Notes a namespace's systemd (its pid here) and the suite's shell that booted it, in STATE/namespaces.
  namespaces.py end [--keep WORK] [--gpu-wait SECONDS]
      Every namespace of these suites still running (recorded, or found: a process named systemd that is PID 1 of
      a pid namespace below ours, whose parent is `unshare`; never matched by a command line, so never the calling
      shell), unless the suite that booted it is still alive (a run beside this one): what runs in it, then its
      end (SIGKILL of its PID 1: the kernel ends every process of the namespace, the units' servers, the daemon and
      anything entered with nsenter), waited for. Then the units and records an earlier run installed (sglang-PORT
      units, their drop-ins and .wants links, /etc/inferops/sglang, /var/lib/inferops/cutover), the earlier runs'
      WORK folders under STATE (work.*, not --keep), and a wait until no process holds GPU memory. Prints what it
      found and did, one line each (run.sh puts them into run.txt).
  namespaces.py kill NS_PID
      Ends one namespace (a poweroff that did not end in time), if NS_PID is still one of these.
STATE is /var/lib/inferops-real (INFEROPS_REAL_STATE); ROOT, the root of the files removed, is / (INFEROPS_REAL_ROOT):
both are set elsewhere only by weights_double.py.
"""
import argparse
import glob
import os
import shutil
import signal
import subprocess
import sys
import time

STATE = os.environ.get("INFEROPS_REAL_STATE", "/var/lib/inferops-real")
ROOT = os.environ.get("INFEROPS_REAL_ROOT", "/")
RECORD = "namespaces"
GPU_FREE_MIB = 1024  # per GPU: an idle H100/H200 shows a few MiB


def read(path):
    try:
        with open(path, "rb") as f:
            return f.read().decode("utf-8", "replace")
    except OSError:
        return None


def stat_of(pid):
    """(comm, ppid, start ticks) of a process, or None."""
    s = read("/proc/%d/stat" % pid)
    if not s or ")" not in s:
        return None
    comm = s[s.index("(") + 1:s.rindex(")")]
    rest = s[s.rindex(")") + 2:].split()
    return comm, int(rest[1]), int(rest[19])


def ns_of(pid):
    try:
        return os.readlink("/proc/%d/ns/pid" % pid)
    except OSError:
        return None


def is_init(pid):
    """Whether pid is one of these namespaces' systemd: named systemd, PID 1 of a pid namespace other than ours, its
    parent unshare. Nothing of the caller's command line is looked at."""
    st = stat_of(pid)
    if not st or st[0] != "systemd":
        return False
    status = read("/proc/%d/status" % pid) or ""
    nspid = next((l.split()[1:] for l in status.splitlines() if l.startswith("NSpid:")), [])
    if len(nspid) < 2 or nspid[-1] != "1" or ns_of(pid) in (None, ns_of(os.getpid())):
        return False
    parent = stat_of(st[1])
    return parent is not None and parent[0] == "unshare"


def pids():
    return [int(p) for p in os.listdir("/proc") if p.isdigit()]


def members(ns):
    return [p for p in pids() if ns_of(p) == ns]


def title(pid):
    t = (read("/proc/%d/cmdline" % pid) or "").replace("\0", " ").strip()
    return t or "[%s]" % ((stat_of(pid) or ("?",))[0])


def records():
    """{ns_pid: (owner_pid, owner_ticks)} from STATE/namespaces."""
    out = {}
    for line in (read(os.path.join(STATE, RECORD)) or "").splitlines():
        bits = line.split()
        if len(bits) == 3 and all(b.isdigit() for b in bits):
            out[int(bits[0])] = (int(bits[1]), int(bits[2]))
    return out


def write_records(recs):
    os.makedirs(STATE, exist_ok=True)
    path = os.path.join(STATE, RECORD)
    with open(path + ".new", "w") as f:
        for ns_pid, (owner, ticks) in sorted(recs.items()):
            f.write("%d %d %d\n" % (ns_pid, owner, ticks))
    os.replace(path + ".new", path)


def record(a):
    st = stat_of(a.owner)
    recs = {k: v for k, v in records().items() if is_init(k)}
    recs[a.ns_pid] = (a.owner, st[2] if st else 0)
    write_records(recs)
    return 0


def alive(owner, ticks):
    st = stat_of(owner)
    return st is not None and st[2] == ticks


def end_one(pid, timeout=60.0):
    """SIGKILL to the namespace's PID 1 (the kernel then kills every process in it); (seconds, what is left)."""
    ns = ns_of(pid)
    t = time.time()
    try:
        os.kill(pid, signal.SIGKILL)
    except OSError:
        pass
    left = members(ns) if ns else []
    while left and time.time() - t < timeout:
        time.sleep(0.1)
        left = members(ns)
    return round(time.time() - t, 1), left


def gpu_used():
    """({gpu index: MiB used}, [compute pids]) or None without nvidia-smi."""
    try:
        used = subprocess.run(["nvidia-smi", "--query-gpu=index,memory.used", "--format=csv,noheader,nounits"],
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, universal_newlines=True, timeout=20,
                              check=False).stdout
        apps = subprocess.run(["nvidia-smi", "--query-compute-apps=pid", "--format=csv,noheader"],
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, universal_newlines=True, timeout=20,
                              check=False).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    mib = {}
    for line in used.splitlines():
        bits = [b.strip() for b in line.split(",")]
        if len(bits) == 2 and bits[0].isdigit() and bits[1].isdigit():
            mib[int(bits[0])] = int(bits[1])
    return mib, [int(p) for p in apps.split() if p.strip().isdigit()]


def installed():
    """What an earlier run's cutovers installed on the machine's own file system."""
    units = os.path.join(ROOT, "etc/systemd/system")
    out = glob.glob(os.path.join(units, "sglang-[0-9]*")) + glob.glob(os.path.join(units, "*.wants", "sglang-[0-9]*"))
    out += glob.glob(os.path.join(units, "*.requires", "sglang-[0-9]*"))
    out += [p for p in (os.path.join(ROOT, "etc/inferops/sglang"), os.path.join(ROOT, "var/lib/inferops/cutover"))
            if os.path.lexists(p)]
    return sorted(out)


def remove(path):
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path, ignore_errors=True)
    else:
        try:
            os.unlink(path)
        except OSError:
            pass


def say(*words):
    print("earlier run: " + " ".join(str(x) for x in words), flush=True)


def end(a):
    recs = records()
    found = sorted(set(p for p in recs if is_init(p)) | set(p for p in pids() if is_init(p)))
    kept = []
    for pid in found:
        owner = recs.get(pid)
        if owner and alive(*owner):
            kept.append(pid)
            say("namespace systemd pid %d left alone: the suite that booted it (pid %d) still runs" % (pid, owner[0]))
            continue
        ns = ns_of(pid)
        inside = [p for p in members(ns) if p != pid]
        servers = sorted(set(title(p)[:150] for p in inside if "sglang" in title(p)))
        say("namespace systemd pid %d (%s), %d processes in it%s" % (
            pid, "recorded" if pid in recs else "found", len(inside),
            "; sglang: " + " | ".join(servers[:6]) if servers else ""))
        seconds, left = end_one(pid)
        say("namespace systemd pid %d ended in %.1f s%s" % (
            pid, seconds, "" if not left else "; STILL THERE: %s" % [title(p)[:80] for p in left[:5]]))
    if not found:
        say("no namespace of these suites running")
    write_records({k: v for k, v in recs.items() if k in kept})
    if kept:
        say("its units and WORK folders kept (a run beside this one)")
    else:
        stale = installed()
        for p in stale:
            remove(p)
        say("removed what an earlier run installed: %s" % (" ".join(stale) if stale else "nothing"))
        keep = os.path.realpath(a.keep) if a.keep else None
        works = [w for w in sorted(glob.glob(os.path.join(STATE, "work.*"))) if os.path.realpath(w) != keep]
        for w in works:
            shutil.rmtree(w, ignore_errors=True)
        say("removed its WORK folders: %s" % (" ".join(works) if works else "none"))
    t = time.time()
    g = gpu_used()
    while g is not None and (g[1] or any(v > GPU_FREE_MIB for v in g[0].values())) and time.time() - t < a.gpu_wait:
        time.sleep(0.5)
        g = gpu_used()
    if g is None:
        say("GPU memory not read (no nvidia-smi)")
    else:
        free = not g[1] and all(v <= GPU_FREE_MIB for v in g[0].values())
        say("GPU memory %s after %.1f s: used MiB %s, compute processes %s" % (
            "free" if free else "NOT FREE", time.time() - t, g[0], g[1] or "none"))
    return 0


def kill(a):
    if not is_init(a.ns_pid):
        print("pid %d is not one of these namespaces' systemd: nothing ended" % a.ns_pid)
        return 1
    seconds, left = end_one(a.ns_pid)
    leftover = " (processes left: %d)" % len(left) if left else ""
    print("namespace systemd pid %d ended in %.1f s%s" % (a.ns_pid, seconds, leftover))
    return 0 if not left else 1


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    sub = p.add_subparsers(dest="cmd")
    r = sub.add_parser("record")
    r.add_argument("ns_pid", type=int)
    r.add_argument("owner", type=int)
    e = sub.add_parser("end")
    e.add_argument("--keep")
    e.add_argument("--gpu-wait", type=float, default=60.0)
    k = sub.add_parser("kill")
    k.add_argument("ns_pid", type=int)
    a = p.parse_args(argv)
    run = {"record": record, "end": end, "kill": kill}.get(a.cmd)
    if run is None:
        p.error("a command: record, end, kill")
    return run(a)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
