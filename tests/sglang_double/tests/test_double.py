"""The double behaves like the real server as ../shared/reference/sglang-behaviour.md describes it."""
import json
import os
import signal
import socket
import time
from pathlib import Path

from conftest import alive, children_of, cmdline, holders, wait_for


def stat_fields(pid):
    stat = Path("/proc/%d/stat" % pid).read_text()
    return stat[stat.rindex(")") + 2:].split()


def test_process_tree_and_phases(double):
    d = double(tp=2, load_seconds=1.0, warmup_seconds=0.6)
    # loading: schedulers and detokenizer are up, the port is closed
    wait_for(lambda: len(d.titled()) == 3)
    assert set(d.titled()) == {"sglang::scheduler_TP0", "sglang::scheduler_TP1", "sglang::detokenizer"}
    assert d.get("/health")[0] == 0 and d.get("/v1/models")[0] == 0
    main_pgid = stat_fields(d.pid)[2]
    for title, pid in d.titled().items():
        assert Path("/proc/%d/comm" % pid).read_text().strip() == title[:15]
        assert stat_fields(pid)[2] == main_pgid, "children stay in the parent's process group"
    assert cmdline(d.pid).endswith("-m sglang.launch_server --model-path /models/tiny --tp 2 --port %d" % d.port)
    # warm-up: model info and models answer, health does not
    wait_for(lambda: d.get("/v1/models")[0] == 200)
    assert d.get("/health")[0] == 503
    assert d.get("/ready")[0] == 503
    status, body = d.get("/model_info")
    assert status == 200 and json.loads(body)["model_path"] == "/models/tiny"
    # ready: /health takes its time, /ready answers, the log says so
    d.wait_ready()
    t0 = time.monotonic()
    assert d.get("/health") == (200, b"")
    assert time.monotonic() - t0 >= 0.2
    assert d.get("/ready")[0] == 200
    models = json.loads(d.get("/v1/models")[1])
    assert models["data"][0]["id"] == "/models/tiny" and models["data"][0]["owned_by"] == "sglang"
    assert json.loads(d.get("/server_info")[1])["version"] == "0.5.23"
    assert "The server is fired up and ready to roll!" in d.logtext()
    assert d.events() == ["loading", "warmup", "ready"]


def test_generate_streams_sse_and_completions(double):
    d = double(tp=1, served_model_name=None)
    d.wait_ready()
    body = json.dumps({"text": "Hello", "sampling_params": {"max_new_tokens": 4}, "stream": True}).encode()
    status, raw = d.get("/generate", method="POST", body=body)
    lines = [line for line in raw.decode().split("\n") if line]
    assert status == 200 and lines[-1] == "data: [DONE]"
    chunks = [json.loads(line[len("data: "):]) for line in lines[:-1]]
    assert [c["meta_info"]["completion_tokens"] for c in chunks] == [1, 2, 3, 4]
    assert chunks[-1]["meta_info"]["finish_reason"]["type"] == "length"
    status, raw = d.get("/v1/completions", method="POST",
                        body=json.dumps({"model": "x", "prompt": "Hi", "max_tokens": 3}).encode())
    assert status == 200 and json.loads(raw)["usage"]["completion_tokens"] == 3


def test_served_model_name(double):
    d = double(args=["--served-model-name", "tiny-chat"], tp=1)
    wait_for(lambda: d.get("/v1/models")[0] == 200)
    assert json.loads(d.get("/v1/models")[1])["data"][0]["id"] == "tiny-chat"


def test_sigterm_while_loading_kills_at_once(double):
    d = double(tp=2, load_seconds=30)
    kids = wait_for(lambda: len(d.titled()) == 3 and list(d.titled().values()))
    d.proc.send_signal(signal.SIGTERM)
    assert d.proc.wait(timeout=2) == -signal.SIGTERM
    wait_for(lambda: not any(alive(p) for p in kids), timeout=2)


def test_sigterm_when_ready_drains_then_exits_0_on_0_5_23(double):
    d = double(tp=2, token_seconds=0.5)  # a 3-token request takes 1.5 s
    d.wait_ready()
    kids = list(d.titled().values())
    import threading
    result = {}
    t = threading.Thread(target=lambda: result.update(r=d.get("/generate", method="POST", body=json.dumps(
        {"text": "x", "sampling_params": {"max_new_tokens": 3}}).encode())))
    t.start()
    time.sleep(0.2)
    d.proc.send_signal(signal.SIGTERM)
    wait_for(lambda: d.get("/ready")[0] == 503, timeout=2)
    assert d.get("/health")[0] == 503
    assert d.proc.wait(timeout=10) == 0
    t.join()
    assert result["r"][0] == 200, "the in-flight request was served before the exit"
    assert "Remaining number of requests 1" in d.logtext()
    wait_for(lambda: not any(alive(p) for p in kids), timeout=2)


def test_sigterm_when_ready_sigkills_itself_on_0_5_15(double):
    d = double(tp=1, version="0.5.15")
    d.wait_ready()
    assert d.get("/ready")[0] == 404, "/ready is new in 0.5.23"
    assert d.get("/model_info")[0] == 200
    d.proc.send_signal(signal.SIGTERM)
    assert d.proc.wait(timeout=5) == -signal.SIGKILL


def test_old_versions_only_have_get_model_info(double):
    d = double(tp=1, version="0.5.5")
    wait_for(lambda: d.get("/v1/models")[0] == 200)
    assert d.get("/model_info")[0] == 404
    assert d.get("/get_model_info")[0] == 200


def test_drain_check_runs_every_5_seconds(double):
    d = double(tp=1, watchdog_seconds=5)
    d.wait_ready()
    t0 = time.monotonic()
    d.proc.send_signal(signal.SIGTERM)
    assert d.proc.wait(timeout=8) == 0
    assert time.monotonic() - t0 <= 5.5


def test_port_taken_fails_late_with_errno_98(double):
    d = double(tp=2, load_seconds=1)
    with socket.socket() as s:  # take the port while the double loads: the failure shows only at bind time
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", d.port))
        s.listen()
        kids = wait_for(lambda: len(d.titled()) == 3 and list(d.titled().values()))
        assert d.proc.poll() is None, "still loading: nothing has noticed the port yet"
        assert d.proc.wait(timeout=10) == 1
    assert "[Errno 98] error while attempting to bind on address ('127.0.0.1', %d): address already in use" % d.port in d.logtext()
    wait_for(lambda: not any(alive(p) for p in kids), timeout=2)


def test_scheduler_death_takes_the_tree(double):
    d = double(tp=2)
    d.wait_ready()
    kids = d.titled()
    os.kill(kids["sglang::scheduler_TP1"], signal.SIGTERM)  # no handler: dies at once
    assert d.proc.wait(timeout=3) == 1
    wait_for(lambda: not any(alive(p) for p in kids.values()), timeout=2)


def test_api_key_guards_all_but_health(double):
    d = double(args=["--api-key", "sk-test"], tp=1)
    d.wait_ready()
    assert d.get("/v1/models")[0] == 401
    assert d.get("/model_info")[0] == 401
    assert d.get("/v1/models", headers={"Authorization": "Bearer sk-wrong"})[0] == 401
    assert d.get("/v1/models", headers={"Authorization": "Bearer sk-test"})[0] == 200
    assert d.get("/health")[0] == 200 and d.get("/ready")[0] == 200
    assert "sk-test" not in d.get("/server_info", headers={"Authorization": "Bearer sk-test"})[1].decode()


def test_removed_flag_is_rejected_like_argparse(double):
    d = double(args=["--cuda-graph-max-bs", "8"], tp=1)
    assert d.proc.wait(timeout=5) == 2
    assert "ambiguous option: --cuda-graph-max-bs" in d.logtext()
    old = double(args=["--cuda-graph-max-bs", "8"], tp=1, version="0.5.15")
    wait_for(lambda: old.get("/v1/models")[0] == 200)
    bad = double(args=["--no-such-flag"], tp=1)
    assert bad.proc.wait(timeout=5) == 2


def test_fault_ignore_sigterm(double):
    d = double(tp=1, faults="ignore_sigterm")
    d.wait_ready()
    d.proc.send_signal(signal.SIGTERM)
    time.sleep(1.2)  # two watchdog periods
    assert d.proc.poll() is None and d.get("/ready")[0] == 200
    d.proc.kill()
    assert d.proc.wait(timeout=2) == -signal.SIGKILL


def test_fault_orphan_workers_escape_the_group_and_survive(double, tmp_path):
    d = double(tp=2, faults="orphan_workers")
    d.wait_ready()
    titled = [p for p in holders(str(tmp_path / "dev")) if cmdline(p).startswith("sglang::scheduler")]
    assert len(titled) == 2
    for p in titled:
        ppid, pgid, sid = map(int, stat_fields(p)[1:4])
        assert ppid != d.pid and pgid != d.pid and sid == p
    d.proc.kill()
    d.proc.wait()
    time.sleep(0.3)
    assert all(alive(p) for p in titled), "orphaned schedulers outlive the parent"


def test_fault_untitled_orphan_holds_devices(double, tmp_path):
    d = double(tp=2, faults="untitled_orphan")
    dev = d.dev
    d.wait_ready()
    untitled = [p for p in holders(str(dev)) if "spawn_main" in cmdline(p)]
    assert len(untitled) == 1
    orphan = untitled[0]
    assert orphan not in children_of(d.pid), "reparented at once"
    ppid, pgid, sid = map(int, stat_fields(orphan)[1:4])
    assert pgid != int(stat_fields(d.pid)[2]) and sid == orphan, "escaped the process group"
    assert "-c from multiprocessing.spawn import spawn_main; spawn_main(" in cmdline(orphan)
    assert "sglang" not in cmdline(orphan)
    held = {os.readlink("/proc/%d/fd/%s" % (orphan, fd)) for fd in os.listdir("/proc/%d/fd" % orphan)}
    assert {str(dev / "nvidia0"), str(dev / "nvidiactl"), str(dev / "nvidia-uvm")} <= held
    assert str(dev / "nvidia1") not in held
    tp1 = d.titled()["sglang::scheduler_TP1"]
    held1 = {os.readlink("/proc/%d/fd/%s" % (tp1, fd)) for fd in os.listdir("/proc/%d/fd" % tp1)}
    assert str(dev / "nvidia1") in held1 and str(dev / "nvidia0") not in held1
    d.proc.kill()
    d.proc.wait()
    time.sleep(0.3)
    assert alive(orphan), "the untitled worker outlives its parent"


def test_fault_crash_during_load(double):
    d = double(tp=2, faults="crash_during_load", load_seconds=1)
    assert d.proc.wait(timeout=5) == 1
    assert "crashed" in d.events() and "ready" not in d.events()


def test_fault_never_healthy(double):
    d = double(tp=1, faults="never_healthy")
    wait_for(lambda: d.get("/v1/models")[0] == 200)
    time.sleep(1)
    assert d.get("/health")[0] == 503 and d.get("/ready")[0] == 503
