"""The facts of a trace (trace.py's trace.json): what a server did, as values that do not depend on the machine,
the model or the time scale (status codes, exit codes, titles, what answered, what was logged), and apart from
them the times measured. The same function reads a trace of the real server and one of the double, so
tests/conformance compares the two fact by fact. `python3 facts.py TRACE.json...` prints them (several traces:
each case from the last trace that ran it without an error).
"""
import json
import re
import sys

NO_ANSWER = -1  # trace.py's status for a request that got no answer in time (0: connection refused)


def _status_kind(code):
    return {0: "refused", NO_ANSWER: "no answer"}.get(code, code)


def _title(cmdline, argv):
    """A child's title with its numbers gone (`main(5)`), the main process as `argv` when it kept its command line."""
    if cmdline == " ".join(argv):
        return "<argv>"
    if (cmdline or "").endswith(" " + " ".join(argv)):  # a console script: the kernel put its interpreter first
        return "<interpreter> <argv>"
    cmdline = re.sub(r"^\S*python3?(\.\d+)? ", "python ", cmdline or "")
    return re.sub(r"\d+", "N", cmdline)


def _tree(case):
    tree, main = case.get("tree") or [], None
    for p in tree:
        if p["main"]:
            main = p
    if main is None:
        return None
    return {
        "titles": sorted(_title(p["cmdline"], case["argv"]) for p in tree),
        "children_of_main": all(p["ppid"] == main["pid"] for p in tree if not p["main"]),
        "one_process_group": all(p["same_pgid_as_main"] for p in tree),
        "one_session": all(p["same_sid_as_main"] for p in tree),
    }


# The watch polls every 50 ms: exit, then /health, then the port. A process that dies between two of those reads shows
# its port refused for a moment before its exit is seen; what comes within DYING s of the exit is that, not a phase.
DYING = 0.3


def _alive_rows(seen):
    end = [row[0] for row in seen if row[1] == "exited"]
    cut = end[0] - DYING if end else float("inf")
    return [row for row in seen if row[1] != "exited" and row[0] < cut]


def _health_after(seen):
    """The distinct /health answers while the process lived, in order of first appearance."""
    out = []
    for row in _alive_rows(seen):
        kind = _status_kind(row[1])
        if kind not in out:
            out.append(kind)
    return out


def _port_closed_before_exit(seen):
    return any(row[2] is False for row in _alive_rows(seen))


def _logged(case, *patterns):
    lines = case.get("log_events") or []
    return {p: any(re.search(p, line) for line in lines) for p in patterns}


def _generation(g):
    meta = g.get("meta_info") or {}
    return {"status": g.get("status"), "text": g.get("text"), "completion_tokens": meta.get("completion_tokens"),
            "finish_reason": (meta.get("finish_reason") or {}).get("type"), "keys": g.get("keys"),
            "output_ids": g.get("output_ids")}


def facts(trace):
    """({fact: value}, {timing: seconds}) of a trace; a case that did not run or failed gives no facts."""
    c = trace["cases"]
    f, t = {}, {}

    m = c.get("main") or {}
    if m.get("ready_s") is not None:
        loading = m["loading_sweeps"][0]
        f["routes_loading"] = {k: v for k, v in loading.items() if k != "t"}
        f["routes_ready"] = {k: v for k, v in m["ready_sweep"].items() if k != "t"}
        f["refused_before_port_open"] = sorted(set(_status_kind(v) for v in m["before_port_open"].values()))
        f["tree"] = _tree(m)
        f["sigterm_after_ready"] = {
            "exit_code": m["exit_code"],
            "health_while_draining": _health_after(m["after_sigterm"])[:1],
            "port_closed_before_exit": _port_closed_before_exit(m["after_sigterm"]),
            "inflight_request": m["inflight_request"]["status"],
            "inflight_completed": m["inflight_request"]["completion_tokens"] == 1500,
            "children_left": len(m["children_left"]),
            "logged": _logged(m, "Gracefully exiting"),
        }
        t["main_port_open_s"], t["main_ready_s"] = m["port_open_s"], m["ready_s"]
        t["sigterm_after_ready_gone_s"] = m["exit_after_s"]

    k = c.get("scheduler_kill_loading") or {}
    if k.get("exit_code") is not None and "kill_s" in k:
        f["scheduler_killed_loading"] = {"exit_code": k["exit_code"], "port_open_at_kill": k["port_open_at_kill"],
                                         "children_left": len(k["children_left"]),
                                         "logged": _logged(k, "scheduler died during initialization")}
        t["scheduler_killed_loading_gone_s"] = k["exit_after_s"]

    k = c.get("scheduler_kill_ready") or {}
    if k.get("after_kill"):
        f["scheduler_killed_ready"] = {"exit_code": k["exit_code"], "health_after_kill": _health_after(k["after_kill"]),
                                       "children_left": len(k["children_left"]),
                                       "logged": _logged(k, "crashed with exit code", "SIGQUIT received")}
        t["scheduler_killed_ready_gone_s"] = k["exit_after_s"]

    k = c.get("scheduler_kill_then_sigterm") or {}
    if k.get("sigterm_after_kill_s") is not None:
        f["scheduler_killed_then_sigterm"] = {"exit_code": k["exit_code"], "children_left": len(k["children_left"])}
        t["scheduler_killed_then_sigterm_gone_after_sigterm_s"] = k["exit_after_s"]

    for name in ("port_taken_other", "port_taken_sglang"):
        k = c.get(name) or {}
        if k.get("bind_error_s") is not None:
            f[name] = {"exit_code": k["exit_code"], "fired_up_logged": k["fired_up_logged"],
                       "children_left": len(k["children_left"])}
            if "alive_after_sigterm_s" in k:
                alive = k["alive_after_sigterm_s"]  # [[s after SIGTERM, alive]] (the first trace: {"5": alive...})
                pairs = sorted((float(a), b) for a, b in alive.items()) if isinstance(alive, dict) else alive
                f[name]["alive_at_each_check_after_sigterm"] = [b for dummy, b in pairs]
                t[name + "_checks_after_sigterm_s"] = [a for a, dummy in pairs]
            if "requests_to_the_holder" in k:
                f[name]["requests_to_the_holder"] = sorted(k["requests_to_the_holder"])
                t[name + "_holder_requests"] = sum(k["requests_to_the_holder"].values())
            t[name + "_lived_after_bind_error_s"] = k["lived_after_bind_error_s"]

    for name in ("sigterm_before_generate", "sigterm_before_generate_skip"):
        k = c.get(name) or {}
        if k.get("after_sigterm"):
            f[name] = {"exit_code": k["exit_code"], "health_503_while_draining": False,
                       "port_closed_before_exit": _port_closed_before_exit(k["after_sigterm"]),
                       "children_left": len(k["children_left"])}
            # a 503 in the first answer is the warm-up's own (/health is 503 until ready), not a drain's
            answers = _alive_rows(k["after_sigterm"])
            f[name]["health_503_while_draining"] = any(row[1] == 503 for row in answers[1:])
            if name.endswith("_skip"):
                # when it goes depends on the requests in flight (uvicorn's shutdown waits for them): not a fact
                del f[name]["port_closed_before_exit"]
            t[name + "_gone_s"] = k["exit_after_s"]
            t[name + "_port_closed_s"] = k["port_closed_after_s"]

    k = c.get("ipv6_serve") or {}
    if k.get("ready_s") is not None:
        f["ipv6"] = {"listeners": sorted([x["family"], x["address"], x["owner_is_main"]] for x in k["listeners"]),
                     "answers": {h: {p: _status_kind(v) for p, v in a.items()} for h, a in k["answers"].items()},
                     "exit_code": k["exit_code"]}
        # the model whose first token ends the sequence: 200 with empty text, as a real model can answer
        f["empty_generation"] = _generation(k["generations"][0])
        f["sglang_serve_tree"] = _tree(k)
    return f, t


def merged(traces):
    cases = {}
    for tr in traces:
        cases.update({name: case for name, case in tr["cases"].items() if "error" not in case})
    return {"cases": cases}


if __name__ == "__main__":
    found = []
    for path in sys.argv[1:]:
        with open(path) as fh:
            found.append(json.load(fh))
    print(json.dumps(facts(merged(found)), indent=1, sort_keys=True))
