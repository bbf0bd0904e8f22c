"""`python -m sglang.bench_serving ...`: the double's benchmark client, as the real one behaves for the sglang backend.

It asks GET /v1/models for the model (unless --model), finds a tokenizer (below), GET /server_info, then sends
--num-prompts streaming POST /generate requests at most --max-concurrency at a time, reads the SSE `data:` lines
(cumulative `text`, `meta_info.completion_tokens`) up to `data: [DONE]`, and computes what the real one computes:
TTFT (first chunk with text), TPOT ((latency - TTFT) / (output tokens - 1)), ITL, end-to-end latency, and
request/input/output/total throughput over the run's duration. One JSON object per run is appended to
--output-file. Authorization comes from OPENAI_API_KEY, as in the real client.

Tokenizer: every real version loads one with transformers before sending anything. 0.5.5/0.5.9 take it from
--tokenizer, else from the model id (--model, else the /v1/models id, which is the --served-model-name alias when
the server has one); 0.5.15+ from --tokenizer, else /model_info's tokenizer_path (or model_path), else the model
id. For the double a tokenizer is available when that name is an existing directory, or an existing file ending
in .json or .model; any other name would be a Hugging Face hub download, which fails offline as the real one does.

Datasets: `random-ids` needs nothing; `sharegpt` (the default) and `random` read the ShareGPT file from
--dataset-path and otherwise download it from Hugging Face, which this double never does: it fails the way
the real client fails offline.
"""
import argparse
import http.client
import json
import os
import random
import statistics
import sys
import threading
import time

from sglang._double.config import at_least, emulated_version

SHAREGPT_URL = ("https://huggingface.co/datasets/anon8231489123/ShareGPT_Vicuna_unfiltered/resolve/main/"
                "ShareGPT_V3_unfiltered_cleaned_split.json")


def parse(argv):
    p = argparse.ArgumentParser(prog="bench_serving")
    p.add_argument("--backend", default="sglang", choices=["sglang", "sglang-native"])
    p.add_argument("--host", default="0.0.0.0")
    p.add_argument("--port", type=int, default=30000)
    p.add_argument("--base-url")
    p.add_argument("--model")
    p.add_argument("--tokenizer")
    p.add_argument("--served-model-name")
    p.add_argument("--dataset-name", default="sharegpt", choices=["sharegpt", "random", "random-ids"])
    p.add_argument("--dataset-path", default="")
    p.add_argument("--num-prompts", type=int, default=1000)
    p.add_argument("--random-input-len", type=int, default=1024)
    p.add_argument("--random-output-len", type=int, default=1024)
    p.add_argument("--random-range-ratio", type=float, default=0.0)
    p.add_argument("--max-concurrency", type=int)
    p.add_argument("--request-rate", type=float, default=float("inf"))
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--output-file")
    p.add_argument("--disable-stream", action="store_true")
    return p.parse_args(argv)


class Client:
    def __init__(self, args):
        host = args.host if args.host not in ("0.0.0.0", "::") else "127.0.0.1"
        if args.base_url:
            rest = args.base_url.split("://", 1)[-1].rstrip("/")
            host, dummy, port = rest.partition(":")
            self.addr = (host, int(port or 80))
        else:
            # SGLang's client puts --host into its URL (http://HOST:PORT), so an IPv6 address comes in brackets
            self.addr = (host[1:-1] if host.startswith("[") and host.endswith("]") else host, args.port)
        key = os.environ.get("OPENAI_API_KEY")
        self.headers = {"Content-Type": "application/json"}
        if key:
            self.headers["Authorization"] = "Bearer " + key

    def get(self, path):
        conn = http.client.HTTPConnection(*self.addr, timeout=60)
        try:
            conn.request("GET", path, headers=self.headers)
            r = conn.getresponse()
            body = r.read()
            if r.status != 200:
                raise RuntimeError("GET %s: HTTP %d %s" % (path, r.status, body[:200]))
            return json.loads(body)
        finally:
            conn.close()

    def generate(self, prompt, max_new_tokens, stream=True):
        """One request: {success, ttft, latency, itl, output_len, error}."""
        out = {"success": False, "ttft": 0.0, "latency": 0.0, "itl": [], "output_len": 0, "error": ""}
        payload = {"text": prompt, "sampling_params": {"temperature": 0.0, "max_new_tokens": max_new_tokens,
                                                       "ignore_eos": True}, "stream": stream}
        t0 = time.perf_counter()
        conn = http.client.HTTPConnection(*self.addr, timeout=600)
        try:
            conn.request("POST", "/generate", body=json.dumps(payload), headers=self.headers)
            r = conn.getresponse()
            if r.status != 200:
                out["error"] = "HTTP %d: %s" % (r.status, r.read()[:200])
                return out
            last = t0
            text = ""
            for raw in r:
                line = raw.decode("utf-8").strip()
                if not line.startswith("data:"):
                    continue
                data = line[5:].strip()
                if data == "[DONE]":
                    break
                chunk = json.loads(data)
                now = time.perf_counter()
                if chunk.get("text") and chunk["text"] != text:
                    if not out["ttft"]:
                        out["ttft"] = now - t0
                    else:
                        out["itl"].append(now - last)
                    last = now
                    text = chunk["text"]
                out["output_len"] = chunk.get("meta_info", {}).get("completion_tokens", out["output_len"])
            out["latency"] = time.perf_counter() - t0
            out["success"] = True
        except (OSError, ValueError, http.client.HTTPException) as e:
            out["error"] = str(e)
        finally:
            conn.close()
        return out


def prompts(args):
    if args.dataset_name in ("sharegpt", "random") and not args.dataset_path:
        print("Downloading from %s" % SHAREGPT_URL, flush=True)
        raise ConnectionError("Failed to download %s: this host cannot reach huggingface.co "
                              "(give --dataset-path, or use --dataset-name random-ids)" % SHAREGPT_URL)
    if args.dataset_path and not os.path.exists(args.dataset_path):
        raise FileNotFoundError(args.dataset_path)
    rng = random.Random(args.seed)
    low_in = max(1, int(args.random_input_len * args.random_range_ratio))
    low_out = max(1, int(args.random_output_len * args.random_range_ratio))
    out = []
    for dummy in range(args.num_prompts):
        n_in = rng.randint(low_in, args.random_input_len)
        out.append((" ".join("w%d" % rng.randint(0, 32000) for dummy in range(n_in)), n_in,
                    rng.randint(low_out, args.random_output_len)))
    return out


def percentile(xs, p):
    if not xs:
        return 0.0
    xs = sorted(xs)
    k = (len(xs) - 1) * p / 100.0
    f, c = int(k), min(int(k) + 1, len(xs) - 1)
    return xs[f] + (xs[c] - xs[f]) * (k - f)


def tokenizer_name(args, client, model):
    if args.tokenizer:
        return args.tokenizer
    if at_least(emulated_version(), "0.5.15"):
        try:
            info = client.get("/model_info")
            return info.get("tokenizer_path") or info.get("model_path") or model
        except (OSError, RuntimeError, ValueError):
            return model
    return model


def load_tokenizer(name):
    """Raises as transformers does offline when `name` is not a local tokenizer (see the module's docstring)."""
    if os.path.isdir(name) or (name.endswith((".json", ".model")) and os.path.isfile(name)):
        return name
    raise OSError("We couldn't connect to 'https://huggingface.co' to load the files, and couldn't find them in the "
                  "cached files. Check your internet connection or see how to run the library in offline mode at "
                  "'https://huggingface.co/docs/transformers/installation#offline-mode'. (tokenizer %r is not a local "
                  "path)" % name)


def run(args):
    client = Client(args)
    model = args.model or client.get("/v1/models")["data"][0]["id"]
    load_tokenizer(tokenizer_name(args, client, model))
    try:  # read only when it answers 200 (0.5.5/0.5.9 ask /get_server_info)
        client.get("/server_info" if at_least(emulated_version(), "0.5.15") else "/get_server_info")
    except RuntimeError:
        pass
    reqs = prompts(args)
    limit = threading.Semaphore(args.max_concurrency or len(reqs) or 1)
    results = [None] * len(reqs)

    def one(i):
        with limit:
            prompt, n_in, n_out = reqs[i]
            res = client.generate(prompt, n_out, stream=not args.disable_stream)
            res["input_len"] = n_in
            results[i] = res

    t0 = time.perf_counter()
    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(reqs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    duration = time.perf_counter() - t0
    ok = [r for r in results if r["success"]]
    total_in = sum(r["input_len"] for r in ok)
    total_out = sum(r["output_len"] for r in ok)
    ttfts = [r["ttft"] * 1000 for r in ok]
    tpots = [(r["latency"] - r["ttft"]) / (r["output_len"] - 1) * 1000 for r in ok if r["output_len"] > 1]
    itls = [x * 1000 for r in ok for x in r["itl"]]
    e2e = [r["latency"] * 1000 for r in ok]

    def stats(name, xs):
        return {"mean_%s_ms" % name: statistics.mean(xs) if xs else 0.0,
                "median_%s_ms" % name: statistics.median(xs) if xs else 0.0,
                "std_%s_ms" % name: statistics.pstdev(xs) if xs else 0.0,
                "p99_%s_ms" % name: percentile(xs, 99)}

    result = {"backend": args.backend, "dataset_name": args.dataset_name, "model_id": args.served_model_name or model,
              "request_rate": args.request_rate, "max_concurrency": args.max_concurrency,
              "random_input_len": args.random_input_len, "random_output_len": args.random_output_len,
              "random_range_ratio": args.random_range_ratio, "duration": duration, "completed": len(ok),
              "total_input_tokens": total_in, "total_output_tokens": total_out,
              "request_throughput": len(ok) / duration, "input_throughput": total_in / duration,
              "output_throughput": total_out / duration, "total_throughput": (total_in + total_out) / duration,
              "concurrency": sum(e2e) / 1000 / duration if duration else 0.0}
    for name, xs in (("e2e_latency", e2e), ("ttft", ttfts), ("tpot", tpots), ("itl", itls)):
        result.update(stats(name, xs))
    print("\n{s:{c}^{n}}".format(s=" Serving Benchmark Result ", n=50, c="="))
    for key in ("backend", "max_concurrency", "completed", "duration", "total_input_tokens", "total_output_tokens",
                "request_throughput", "output_throughput", "total_throughput", "mean_ttft_ms", "mean_tpot_ms",
                "p99_e2e_latency_ms"):
        value = round(result[key], 2) if isinstance(result[key], float) else result[key]
        print("{:<40} {:<10}".format(key + ":", str(value)))
    print("=" * 50, flush=True)
    if args.output_file:
        with open(args.output_file, "a") as f:
            f.write(json.dumps(result) + "\n")
    if len(ok) < len(reqs):
        errors = sorted(set(r["error"] for r in results if not r["success"]))
        print("%d of %d requests failed: %s" % (len(reqs) - len(ok), len(reqs), errors[:3]), file=sys.stderr)
    return result


def main(argv=None):
    run(parse(sys.argv[1:] if argv is None else argv))
    return 0


if __name__ == "__main__":
    sys.exit(main())
