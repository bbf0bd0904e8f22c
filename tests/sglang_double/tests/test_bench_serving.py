"""The double's sglang.bench_serving against the double on loopback: the real client's calls, metrics and JSONL,
its offline failure for datasets that download, and the server-side knob that makes a server slower."""
import json
import os
import subprocess
import sys

from .conftest import DOUBLE

ARGS = ["--backend", "sglang", "--host", "127.0.0.1", "--dataset-name", "random-ids", "--random-input-len", "32",
        "--random-output-len", "8", "--random-range-ratio", "1", "--num-prompts", "8", "--seed", "1"]


def bench(port, out, *extra, key=None, version="0.5.23"):
    env = dict(os.environ, PYTHONPATH=str(DOUBLE), SGLANG_DOUBLE_VERSION=version)
    env.pop("OPENAI_API_KEY", None)
    if key:
        env["OPENAI_API_KEY"] = key
    return subprocess.run([sys.executable, "-m", "sglang.bench_serving", "--port", str(port), "--output-file",
                           str(out), *ARGS, *extra], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          universal_newlines=True, timeout=120, check=False)


def test_runs_at_each_concurrency_and_appends_one_json_line(double, tmp_path):
    d = double(token_seconds="0.01")
    d.wait_ready()
    out = tmp_path / "bench.jsonl"
    for c in ("1", "4"):
        r = bench(d.port, out, "--max-concurrency", c)
        assert r.returncode == 0, r.stderr
        assert "Serving Benchmark Result" in r.stdout
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [row["max_concurrency"] for row in rows] == [1, 4]
    for row in rows:
        assert row["completed"] == 8 and row["total_output_tokens"] == 64 and row["total_input_tokens"] == 256
        assert row["output_throughput"] == row["total_output_tokens"] / row["duration"]
        assert 10 <= row["mean_ttft_ms"] < 500 and 9 <= row["mean_tpot_ms"] < 100  # one token per 10 ms
        for key in ("request_throughput", "total_throughput", "p99_e2e_latency_ms", "mean_itl_ms"):
            assert row[key] > 0
    assert rows[1]["output_throughput"] > 2.5 * rows[0]["output_throughput"], "4 at a time is faster"


def test_a_slower_server_measures_slower(double, tmp_path):
    fast, slow = double(token_seconds="0.005"), double(token_seconds="0.02")
    fast.wait_ready()
    slow.wait_ready()
    assert bench(fast.port, tmp_path / "f.jsonl", "--max-concurrency", "2").returncode == 0
    assert bench(slow.port, tmp_path / "s.jsonl", "--max-concurrency", "2").returncode == 0
    f = json.loads((tmp_path / "f.jsonl").read_text())["output_throughput"]
    s = json.loads((tmp_path / "s.jsonl").read_text())["output_throughput"]
    assert s < 0.5 * f


def test_datasets_that_download_fail_offline_and_the_api_key_is_sent(double, tmp_path):
    d = double(["--api-key", "k3y"], token_seconds="0.001")
    d.wait_ready()
    r = bench(d.port, tmp_path / "x.jsonl", "--dataset-name", "sharegpt", key="k3y")
    assert r.returncode != 0 and "ShareGPT" in r.stdout + r.stderr and "huggingface.co" in r.stderr
    assert not (tmp_path / "x.jsonl").exists()
    assert bench(d.port, tmp_path / "y.jsonl").returncode != 0, "without the key: 401"
    assert bench(d.port, tmp_path / "y.jsonl", key="k3y").returncode == 0
    bad = bench(d.port, tmp_path / "z.jsonl", "--max-concurency", "2")
    assert bad.returncode == 2 and "unrecognized arguments" in bad.stderr


def test_a_tokenizer_is_needed_as_in_each_real_version(double, tmp_path):
    for version in ("0.5.9", "0.5.23"):
        d = double(["--served-model-name", "tiny-chat"], tp=1, version=version, token_seconds="0.001")
        d.wait_ready()
        r = bench(d.port, tmp_path / "a.jsonl", version=version)
        if version == "0.5.9":  # the tokenizer is the /v1/models id: the alias, not a local path
            assert r.returncode != 0 and "huggingface.co" in r.stderr and "'tiny-chat'" in r.stderr
            assert bench(d.port, tmp_path / "a.jsonl", "--tokenizer", d.model, version=version).returncode == 0
        else:  # 0.5.15+ read tokenizer_path from /model_info
            assert r.returncode == 0, r.stderr
    rows = [json.loads(line) for line in (tmp_path / "a.jsonl").read_text().splitlines()]
    assert [row["model_id"] for row in rows] == ["tiny-chat", "tiny-chat"]
