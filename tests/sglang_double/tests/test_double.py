"""The double behaves like the real server as ../shared/reference/sglang-behaviour.md describes it."""
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from .conftest import (DOUBLE, Double, alive, children_of, cmdline, console_script, holders, open_files,
                       wait_for)


def stat_fields(pid):
    stat = Path("/proc/%d/stat" % pid).read_text()
    return stat[stat.rindex(")") + 2:].split()


def test_process_tree_and_phases(double):
    d = double(tp=2, load_seconds=4.0, warmup_seconds=0.6)
    # loading: schedulers and detokenizer are up, the port is closed
    wait_for(lambda: len(d.titled()) == 3)
    assert set(d.titled()) == {"sglang::scheduler_TP0", "sglang::scheduler_TP1", "sglang::detokenizer"}
    assert d.get("/health")[0] == 0 and d.get("/v1/models")[0] == 0
    main_pgid = stat_fields(d.pid)[2]
    for title, pid in d.titled().items():
        assert Path("/proc/%d/comm" % pid).read_text().strip() == title[:15]
        assert stat_fields(pid)[2] == main_pgid, "children stay in the parent's process group"
    assert cmdline(d.pid).endswith("-m sglang.launch_server --model-path %s --tp 2 --port %d" % (d.model, d.port))
    # warm-up: model info and models answer, health does not
    wait_for(lambda: d.get("/v1/models")[0] == 200)
    assert d.get("/health")[0] == 503
    assert d.get("/ready")[0] == 503
    status, body = d.get("/model_info")
    assert status == 200 and json.loads(body)["model_path"] == d.model
    # ready: /health takes its time, /ready answers, the log says so
    d.wait_ready()
    t0 = time.monotonic()
    assert d.get("/health") == (200, b"")
    assert time.monotonic() - t0 >= 0.2
    assert d.get("/ready")[0] == 200
    models = json.loads(d.get("/v1/models")[1])
    assert models["data"][0]["id"] == d.model and models["data"][0]["owned_by"] == "sglang"
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
    assert d.get("/model_info")[0] == 404 and d.get("/server_info")[0] == 404
    assert d.get("/get_model_info")[0] == 200 and d.get("/get_server_info")[0] == 200


def test_drain_check_runs_every_5_seconds(double):
    d = double(tp=1, watchdog_seconds=5)
    d.wait_ready()
    t0 = time.monotonic()
    d.proc.send_signal(signal.SIGTERM)
    assert d.proc.wait(timeout=8) == 0
    assert time.monotonic() - t0 <= 5.5


class Holder:
    """Another program on the port: an HTTP server answering 404 to everything, counting what it is asked."""

    def __init__(self, port):
        import http.server  # pylint: disable=import-outside-toplevel
        import threading  # pylint: disable=import-outside-toplevel

        asked = self.asked = []

        class H(http.server.BaseHTTPRequestHandler):
            def do_GET(self):  # pylint: disable=invalid-name
                asked.append(self.path)
                self.send_response(404)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *a):  # pylint: disable=arguments-differ
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", port), H)
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


def test_port_taken_lives_on_ignoring_sigterm_then_sigkills_itself(double):
    """Seen on 0.5.15: the bind fails late; uvicorn's shutdown waits for the warm-up thread, which asks the holder
    for /model_info (120 tries in the real one), a SIGTERM meanwhile changes nothing; then the tree and itself die
    by SIGKILL."""
    d = double(tp=2, load_seconds=2, warmup_tries=5, warmup_retry_seconds=0.4)
    holder = Holder(d.port)
    try:
        kids = wait_for(lambda: len(d.titled()) == 3 and list(d.titled().values()))
        wait_for(lambda: "address already in use" in d.logtext(), timeout=15)
        assert "[Errno 98] error while attempting to bind on address ('127.0.0.1', %d)" % d.port in d.logtext()
        d.proc.send_signal(signal.SIGTERM)
        time.sleep(0.5)
        assert d.proc.poll() is None and all(alive(p) for p in kids), "SIGTERM ignored, the schedulers kept"
        assert d.proc.wait(timeout=10) == -signal.SIGKILL
        assert "Initialization failed. warmup error" in d.logtext()
        assert holder.asked == ["/model_info"] * 5
        wait_for(lambda: not any(alive(p) for p in kids), timeout=2)
    finally:
        holder.close()


def test_port_taken_by_another_server_exits_3_after_warming_it_up(double, tmp_path):
    """Seen on 0.5.15: the new server's warm-up talks to the one holding the port, logs "fired up", exits 3."""
    old = double(tp=1)
    old.wait_ready()
    new = Double(tmp_path / "new", tp=1, port=old.port)
    try:
        assert new.proc.wait(timeout=20) == 3
        assert "address already in use" in new.logtext() and "The server is fired up" in new.logtext()
        assert old.get("/health")[0] == 200, "the old one still serves"
    finally:
        if new.proc.poll() is None:
            new.proc.kill()


def test_sigterm_before_the_first_generate_closes_the_port_without_503(double):
    """Seen on 0.5.15: SGLang's SIGTERM handler comes with the first generate; before it uvicorn closes the port
    (no 503), its shutdown waits for the warm-up thread, which is refused until it gives up: SIGKILL."""
    d = double(tp=1, warmup_seconds=5, warmup_tries=3, warmup_retry_seconds=0.3)
    wait_for(lambda: d.get("/v1/models")[0] == 200, timeout=15)
    d.proc.send_signal(signal.SIGTERM)
    wait_for(lambda: not port_open(d.port), timeout=3)
    assert d.proc.poll() is None, "the warm-up thread keeps it alive"
    assert d.proc.wait(timeout=15) == -signal.SIGKILL
    assert "Draining" not in d.logtext()


def test_sigterm_before_the_first_generate_with_skip_server_warmup_dies_of_it(double):
    d = double(["--skip-server-warmup"], tp=1)
    wait_for(lambda: d.get("/v1/models")[0] == 200, timeout=15)
    d.proc.send_signal(signal.SIGTERM)
    assert d.proc.wait(timeout=5) == -signal.SIGTERM


def test_host_ipv6_wildcard_serves_ipv6_only(double):
    """Seen on 0.5.15: `--host ::` listens on tcp6 only; [::1] answers, 127.0.0.1 is refused."""
    d = double(["--host", "::"], tp=1)
    wait_for(lambda: http6(d.port, "/health") == 200, timeout=20)
    assert d.get("/health")[0] == 0


def port_open(port):
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def http6(port, path):
    import urllib.error  # pylint: disable=import-outside-toplevel
    import urllib.request  # pylint: disable=import-outside-toplevel

    try:
        with urllib.request.urlopen("http://[::1]:%d%s" % (port, path), timeout=5) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code
    except OSError:
        return 0


def test_lost_scheduler_then_sigterm_after_health_failed_force_exits_0_5_9(double):
    """0.5.5/0.5.9 notice no lost scheduler, but a failed health check marks the server unhealthy and a SIGTERM then
    skips the drain (tokenizer_manager.py sigterm_watchdog: "Force exiting")."""
    d = double(tp=1, version="0.5.9", watchdog_seconds=0.3)
    d.wait_ready()
    os.kill(d.titled()["sglang::scheduler"], signal.SIGKILL)
    wait_for(lambda: d.get("/health")[0] == 503, timeout=5)
    d.proc.send_signal(signal.SIGTERM)
    assert d.proc.wait(timeout=3) == -signal.SIGKILL
    assert "health check failed. Force exiting" in d.logtext()


def test_fault_empty_generation(double):
    d = double(tp=1, faults="empty_generation")
    d.wait_ready()
    code, body = d.get("/generate", method="POST", body=json.dumps({"text": "hi", "sampling_params": {
        "max_new_tokens": 8}}).encode(), headers={"Content-Type": "application/json"})
    answer = json.loads(body)
    assert (code, answer["text"], answer["output_ids"], answer["meta_info"]["completion_tokens"]) == (200, "", [0], 1)
    assert answer["meta_info"]["finish_reason"]["type"] == "stop"


def test_get_generate_is_405(double):
    d = double(tp=1)
    wait_for(lambda: d.get("/v1/models")[0] == 200, timeout=15)
    assert d.get("/generate")[0] == 405


def test_scheduler_killed_when_serving_0_5_15_on_sigkill_the_tree_after_the_crash_sleep(double):
    """Seen on 0.5.15: the watchdog's SIGQUIT within a second, the handler's 5 s sleep (here 1 s; /health gets no
    answer meanwhile), then SIGKILL of the tree and itself."""
    d = double(tp=2, version="0.5.15", crash_sleep_seconds=1)
    d.wait_ready()
    kids = d.titled()
    t0 = time.monotonic()
    os.kill(kids["sglang::scheduler_TP1"], signal.SIGKILL)  # the OOM killer
    assert d.proc.wait(timeout=5) == -signal.SIGKILL
    assert 1.0 <= time.monotonic() - t0 < 3.5
    assert "crashed with exit code -9" in d.logtext()
    wait_for(lambda: not any(alive(p) for p in kids.values()), timeout=2)


def test_scheduler_killed_while_loading_0_5_23_noticed_by_the_load_poll(double):
    """The RuntimeError of _wait_for_scheduler_ready: exit 1 (seen on 0.5.15; 0.5.23 has the same code)."""
    d = double(tp=1, load_seconds=30, load_poll_seconds=1)
    kids = wait_for(lambda: len(d.titled()) == 2 and d.titled())
    t0 = time.monotonic()
    os.kill(kids["sglang::scheduler"], signal.SIGKILL)
    assert d.proc.wait(timeout=4) == 1
    assert time.monotonic() - t0 <= 1.5
    assert "scheduler died during initialization (exit code: -9)" in d.logtext()
    assert d.get("/health")[0] == 0, "the port never opened"


def test_scheduler_killed_while_loading_0_5_9_blocks_for_ever(double):
    t0 = time.monotonic()
    d = double(tp=1, version="0.5.9", load_seconds=4, load_poll_seconds=0.2)
    kids = wait_for(lambda: len(d.titled()) == 2 and d.titled())
    os.kill(kids["sglang::scheduler"], signal.SIGKILL)
    wait_for(lambda: "child_lost" in d.events())
    time.sleep(max(0.0, t0 + 5.5 - time.monotonic()))  # past the load time and many poll periods
    assert d.proc.poll() is None and alive(kids["sglang::detokenizer"])
    assert d.get("/v1/models")[0] == 0, "loading never ends: the port stays closed"
    assert d.events() == ["loading", "child_lost"]
    d.proc.send_signal(signal.SIGTERM)
    assert d.proc.wait(timeout=2) == -signal.SIGTERM


def test_scheduler_killed_when_serving_0_5_5_keeps_serving_models_not_health(double):
    d = double(tp=1, version="0.5.5", liveness_seconds=0.1)
    d.wait_ready()
    os.kill(d.titled()["sglang::scheduler"], signal.SIGKILL)
    time.sleep(1.5)
    assert d.proc.poll() is None
    assert d.get("/v1/models")[0] == 200 and d.get("/health")[0] == 503
    assert "child_lost" in d.events()


def test_sigint_stops_the_server_and_its_children(double):
    d = double(tp=2)
    d.wait_ready()
    kids = d.titled()
    d.proc.send_signal(signal.SIGINT)
    assert d.proc.wait(timeout=3) == 0
    assert "Shutting down" in d.logtext()
    wait_for(lambda: not any(alive(p) for p in kids.values()), timeout=2)
    loading = double(tp=1, load_seconds=30)
    kids = wait_for(lambda: len(loading.titled()) == 2 and loading.titled())
    loading.proc.send_signal(signal.SIGINT)
    assert loading.proc.wait(timeout=3) == -signal.SIGINT
    wait_for(lambda: not any(alive(p) for p in kids.values()), timeout=2)


def test_sigterm_when_ready_0_5_15_stops_the_schedulers_before_sigkill(double):
    d = double(tp=2, version="0.5.15")
    d.wait_ready()
    d.proc.send_signal(signal.SIGTERM)
    assert d.proc.wait(timeout=5) == -signal.SIGKILL
    assert "Shutting down schedulers." in d.logtext()


def test_titles_per_parallelism(double):
    d = double(tp=1, args=["--dp", "2"])
    d.wait_ready()
    titled = d.titled()
    assert set(titled) == {"sglang::data_parallel_controller", "sglang::scheduler_DP0", "sglang::scheduler_DP1",
                           "sglang::detokenizer"}
    controller = titled["sglang::data_parallel_controller"]
    assert stat_fields(controller)[1] == str(d.pid)
    assert [stat_fields(titled[t])[1] for t in ("sglang::scheduler_DP0", "sglang::scheduler_DP1")] == [str(controller)] * 2
    old = double(tp=2, version="0.5.5", args=["--dp-size", "1", "--pp-size", "2"])
    old.wait_ready()
    assert {t for t in old.titled() if "scheduler" in t} == {
        "sglang::scheduler_TP0_PP0", "sglang::scheduler_TP1_PP0", "sglang::scheduler_TP0_PP1", "sglang::scheduler_TP1_PP1"}


def test_sglang_serve_console_script(double):
    d = double(tp=1, launcher="script")
    d.wait_ready()
    assert " serve --model-path %s " % d.model in cmdline(d.pid) + " "
    assert cmdline(d.pid).split()[1].endswith("/bin/sglang")
    assert set(d.titled()) == {"sglang::scheduler", "sglang::detokenizer"}


def test_read_model_reads_every_file(double, tmp_path):
    model = tmp_path / "big"
    model.mkdir()
    (model / "a.safetensors").write_bytes(os.urandom(3 << 20))
    (model / "sub").mkdir()
    (model / "sub" / "b.bin").write_bytes(os.urandom(1 << 20))
    d = double(tp=1, model=model, read_model="1", load_seconds=0.1)
    d.wait_ready()
    assert "read %d bytes" % (4 << 20) in d.logtext()


def test_api_key_guards_all_but_health(double):
    d = double(args=["--api-key", "sk-test"], tp=1)
    d.wait_ready()
    assert d.get("/v1/models")[0] == 401
    assert d.get("/model_info")[0] == 401
    assert d.get("/no-such-path")[0] == 401
    assert d.get("/v1/models", headers={"Authorization": "Bearer sk-wrong"})[0] == 401
    assert d.get("/v1/models", headers={"Authorization": "Bearer sk-test"})[0] == 200
    assert d.get("/health")[0] == 200 and d.get("/ready")[0] == 200
    assert "sk-test" not in d.get("/server_info", headers={"Authorization": "Bearer sk-test"})[1].decode()
    old = double(args=["--api-key", "sk-test"], tp=1, version="0.5.9")
    old.wait_ready()
    assert old.get("/ready")[0] == 401, "/ready is neither open nor a route before 0.5.23"
    assert old.get("/ready", headers={"Authorization": "Bearer sk-test"})[0] == 404


def test_removed_flag_is_rejected_like_argparse(double):
    d = double(args=["--cuda-graph-max-bs", "8"], tp=1)
    assert d.proc.wait(timeout=5) == 2
    assert "ambiguous option: --cuda-graph-max-bs" in d.logtext()
    assert double(args=["--cuda-graph-bs", "8"], tp=1).proc.wait(timeout=5) == 2
    old = double(args=["--cuda-graph-max-bs", "8", "--cuda-graph-bs", "1", "2"], tp=1, version="0.5.15")
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
    held = set(open_files(orphan))
    assert {str(dev / "nvidia0"), str(dev / "nvidiactl"), str(dev / "nvidia-uvm")} <= held
    assert str(dev / "nvidia1") not in held
    tp1 = d.titled()["sglang::scheduler_TP1"]
    held1 = set(open_files(tp1))
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


def test_killall_sglang_exists_from_0_5_15_and_skips_without_gpus(tmp_path):
    script = console_script(tmp_path, "killall_sglang", "sglang.cli.killall")
    env = dict(os.environ, PYTHONPATH=str(DOUBLE), PATH=str(tmp_path / "bin"), CUDA_VISIBLE_DEVICES="")
    old = subprocess.run([sys.executable, str(script)], env=dict(env, SGLANG_DOUBLE_VERSION="0.5.9"),
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True, check=False)
    assert old.returncode == 127 and "not part of sglang 0.5.9" in old.stderr
    new = subprocess.run([sys.executable, str(script)], env=dict(env, SGLANG_DOUBLE_VERSION="0.5.23"),
                         stdout=subprocess.PIPE, universal_newlines=True, check=False)
    assert new.returncode == 0 and "No GPUs detected, skipping cleanup" in new.stdout and "SKIP" in new.stdout


def test_the_version_installed_in_a_venv(monkeypatch, tmp_path):
    monkeypatch.syspath_prepend(str(DOUBLE))
    from sglang._double import config  # pylint: disable=import-outside-toplevel

    monkeypatch.delenv("SGLANG_DOUBLE_VERSION", raising=False)
    monkeypatch.setattr(sys, "prefix", str(tmp_path))
    assert config.emulated_version() == "0.5.23"
    (tmp_path / "sglang-double-version").write_text("0.5.9\n")
    assert config.emulated_version() == "0.5.9"
    monkeypatch.setenv("SGLANG_DOUBLE_VERSION", "0.5.15")
    assert config.emulated_version() == "0.5.15"


def test_the_version_emulated_is_the_installed_wheels(tmp_path):
    """Without SGLANG_DOUBLE_VERSION, the double runs as the version of its wheel (tests/testbed/wheels.sh builds
    0.5.15+double and 0.5.23+double): `pip install -U sglang` upgrades it as it does the real one. A distribution of
    sglang that is not the double's says nothing (0.5.23)."""
    def emulated(dist):
        site = tmp_path / dist
        (site / ("%s.dist-info" % dist)).mkdir(parents=True)
        (site / ("%s.dist-info" % dist) / "METADATA").write_text(
            "Metadata-Version: 2.1\nName: sglang\nVersion: %s\n" % dist.split("-", 1)[1])
        env = dict((k, v) for k, v in os.environ.items() if k != "SGLANG_DOUBLE_VERSION")
        env["PYTHONPATH"] = "%s:%s" % (site, DOUBLE)
        return subprocess.check_output([sys.executable, "-c", "import sglang; print(sglang.__version__)"], env=env,
                                       universal_newlines=True).strip()
    assert emulated("sglang-0.5.15+double") == "0.5.15"
    assert emulated("sglang-0.5.9") == "0.5.23"


# --- shared memory (sglang/_double/shm.py) ------------------------------------------------------------------------
SHM = "/dev/shm"


def shm_records(d):
    """(created, unlinked): the names the server's processes recorded, in order."""
    path = d.log.parent / "state.jsonl.shm"
    recs = [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []
    return ([r["name"] for r in recs if r["event"] == "shm_created"],
            [r["name"] for r in recs if r["event"] == "shm_unlinked"])


def tree(pid):
    out, todo = [], [pid]
    while todo:
        for c in children_of(todo.pop()):
            out.append(c)
            todo.append(c)
    return out


def sigkill_tree(d):
    """Every process of the tree SIGKILLed (systemd's final SIGKILL of the unit's cgroup, kill_process_tree): the
    resource tracker first, so that it cannot unlink what the others registered."""
    for pid in sorted(tree(d.pid), key=lambda p: "resource_tracker" not in cmdline(p)) + [d.pid]:
        os.kill(pid, signal.SIGKILL)
    d.proc.wait(timeout=5)


def expected_names(version, main, tp0):
    import re  # pylint: disable=import-outside-toplevel
    if version in ("0.5.5", "0.5.9"):  # Python's nameless psm_<hex>: the node check, the message queue
        return [re.compile(r"psm_[0-9a-f]+\Z"), re.compile(r"psm_[0-9a-f]+\Z"),
                re.compile("multi_tokenizer_args_%d\\Z" % main)]
    return [re.compile(r"sglang_loads_[0-9a-f]{12}_[0-9a-f]{8}\.shm\Z"),
            re.compile(r"sgl_shm_nodecheck_%d_[0-9a-f]{8}\Z" % tp0), re.compile(r"sgl_shm_mq_%d_[0-9a-f]{8}\Z" % tp0),
            re.compile("multi_tokenizer_args_%d\\Z" % main)]


def unlink_all(names):
    for name in names:
        try:
            os.unlink(os.path.join(SHM, name))
        except FileNotFoundError:
            pass


@pytest.mark.parametrize("version", ["0.5.5", "0.5.9", "0.5.15", "0.5.17", "0.5.23"])
def test_shm_sigkilled_server_leaves_the_versions_segments(double, version):
    d = double(args=["--tokenizer-worker-num", "2"], tp=2, version=version)
    try:
        d.wait_ready()
        created, unlinked = shm_records(d)
        tp0 = d.titled()["sglang::scheduler_TP0"]
        pats = expected_names(version, d.pid, tp0)
        assert len(created) == len(pats) and all(p.match(n) for p, n in zip(pats, created)), created
        # the node check is gone after the group's barrier, the rest live in /dev/shm, the owner's only
        assert unlinked == [created[-3]]
        left = [n for n in created if n not in unlinked]
        for name in left:
            st = os.stat(os.path.join(SHM, name))
            assert st.st_uid == os.getuid() and st.st_mode & 0o777 == 0o600, name
        if version == "0.5.9":
            assert not [n for n in created if n.startswith(("sgl_shm_", "sglang_loads_"))]
        sigkill_tree(d)
        time.sleep(0.5)  # nothing is left that could unlink them
        assert sorted(n for n in left if os.path.exists(os.path.join(SHM, n))) == sorted(left)
    finally:
        unlink_all(shm_records(d)[0])


def test_shm_clean_stop_0_5_23_leaves_only_the_load_snapshot(double):
    """The drained stop: the ShutdownReq's clean scheduler exit unlinks the message queue, uvicorn's finally the
    tokenizer args; the load snapshot file is never unlinked (seen on a real 0.5.15: one a start, clean stop or not)."""
    d = double(args=["--tokenizer-worker-num", "2"], tp=2, version="0.5.23")
    try:
        d.wait_ready()
        created = shm_records(d)[0]
        d.proc.send_signal(signal.SIGTERM)
        assert d.proc.wait(timeout=10) == 0
        time.sleep(0.3)
        left = [n for n in created if os.path.exists(os.path.join(SHM, n))]
        assert len(left) == 1 and left[0].startswith("sglang_loads_"), left
    finally:
        unlink_all(shm_records(d)[0])


def test_shm_sigint_0_5_9_unlinks_the_tokenizer_args(double):
    d = double(args=["--tokenizer-worker-num", "2"], tp=1, version="0.5.9")
    try:
        d.wait_ready()
        created = shm_records(d)[0]
        assert created == ["multi_tokenizer_args_%d" % d.pid]
        d.proc.send_signal(signal.SIGINT)
        assert d.proc.wait(timeout=10) == 0
        assert not os.path.exists(os.path.join(SHM, created[0]))
    finally:
        unlink_all(shm_records(d)[0])


def test_shm_none_without_tp_and_tokenizer_workers_0_5_9(double):
    d = double(tp=1, version="0.5.9")
    try:
        d.wait_ready()
        assert shm_records(d) == ([], [])
    finally:
        unlink_all(shm_records(d)[0])


def test_a_stopped_scheduler_fails_the_health_check_and_its_next_answer_makes_the_server_healthy(double, monkeypatch):
    """/health_generate waits SGLANG_HEALTH_CHECK_TIMEOUT for any output of the schedulers: none while one is stopped
    (503, UnHealthy); once it runs again the next check answers 200 and the server is Up again (every version's
    health_generate sets `server_status = ServerStatus.Up`): a SIGTERM then drains, no force exit."""
    monkeypatch.setenv("SGLANG_HEALTH_CHECK_TIMEOUT", "1")
    d = double(tp=2, version="0.5.23")
    d.wait_ready()
    scheduler = d.titled()["sglang::scheduler_TP0"]
    os.kill(scheduler, signal.SIGSTOP)
    try:
        assert d.get("/health_generate")[0] == 503
    finally:
        os.kill(scheduler, signal.SIGCONT)
    assert d.get("/health_generate")[0] == 200
    d.proc.send_signal(signal.SIGTERM)
    assert d.proc.wait(timeout=15) == 0
    assert "Force exiting" not in d.logtext()


def test_a_long_prefill_holds_every_output_back_and_keeps_the_schedulers_busy(double, monkeypatch):
    """A prompt's prefill (SGLANG_DOUBLE_PREFILL_SECONDS_PER_TOKEN a word) runs in the schedulers: no output of theirs
    meanwhile (a health check fails after its timeout), each scheduler's CPU time grows."""
    monkeypatch.setenv("SGLANG_HEALTH_CHECK_TIMEOUT", "1")
    d = double(tp=2, version="0.5.23", prefill_seconds_per_token="0.01")
    d.wait_ready()
    pids = [d.titled()[t] for t in ("sglang::scheduler_TP0", "sglang::scheduler_TP1")]

    def cpu(pid):
        with open("/proc/%d/stat" % pid) as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return int(fields[11]) + int(fields[12])

    before = [cpu(p) for p in pids]
    body = json.dumps({"text": " ".join(["w"] * 400), "sampling_params": {"max_new_tokens": 2}}).encode()
    result = {}
    t = threading.Thread(target=lambda: result.update(got=d.get("/generate", method="POST", body=body, headers={
        "Content-Type": "application/json"})))
    t.start()
    time.sleep(0.5)
    assert d.get("/health_generate")[0] == 503
    t.join(30)
    assert result["got"][0] == 200
    assert all(cpu(p) - b >= os.sysconf("SC_CLK_TCK") for p, b in zip(pids, before)), "a second of CPU each"


@pytest.mark.parametrize("version", ["0.5.5", "0.5.15", "0.5.23"])
def test_a_kv_pool_of_no_tokens_fails_the_start_after_the_weights_load(double, version):
    d = double(("--max-total-tokens", "0"), tp=1, version=version, load_seconds=0.3)
    assert d.proc.wait(timeout=10) != 0
    text = d.logtext()
    assert text.index("Load weight end.") < text.index("RuntimeError: Not enough memory. Please try to increase "
                                                       "--mem-fraction-static.")
    assert "kv_pool_failed" in d.events() and "ready" not in d.events()
