"""The HTTP API the double answers, in the shapes the real server uses."""
import json
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler

from sglang._double.config import at_least
from sglang._double.nodes import DUMMY_ROUTES


def open_paths(version):
    """Path prefixes the real --api-key middleware lets through without a key (every method): `/health*` and
    `/metrics` (0.5.5 sglang/srt/utils/common.py, 0.5.9/0.5.15 sglang/srt/utils/auth.py); 0.5.23 adds `/ready`."""
    return ("/health", "/ready", "/metrics") if at_least(version, "0.5.23") else ("/health", "/metrics")


def routes(version):
    """The info, health and ready routes of the emulated version's http_server.py."""
    found = {"/health", "/health_generate", "/get_model_info", "/get_server_info"}
    if at_least(version, "0.5.9"):
        found |= {"/model_info", "/server_info"}
    if at_least(version, "0.5.23"):
        found.add("/ready")
    return found


class Handler(BaseHTTPRequestHandler):
    server_version = "uvicorn"
    sys_version = ""

    def log_message(self, format, *args):  # pylint: disable=redefined-builtin
        pass  # uvicorn's access log is not what the tests read

    @property
    def srv(self):
        return self.server.server

    # --- helpers -------------------------------------------------------------------------
    def send_json(self, code, obj):
        body = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def send_empty(self, code):
        self.send_response(code)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def authorised(self):
        key = self.srv.args.api_key
        if not key or self.path.startswith(open_paths(self.srv.knobs.version)):
            return True
        if self.headers.get("Authorization") == "Bearer " + key:
            return True
        self.send_json(401, {"error": "Unauthorized"})
        return False

    def body(self):
        n = int(self.headers.get("Content-Length") or 0)
        try:
            return json.loads(self.rfile.read(n) or b"{}")
        except ValueError:
            return None

    # --- GET -----------------------------------------------------------------------------
    def do_GET(self):  # pylint: disable=invalid-name
        if not self.authorised():
            return
        s = self.srv
        path = self.path.split("?", 1)[0]
        if path == "/generate":  # FastAPI: a POST/PUT route asked with GET
            return self.send_json(405, {"detail": "Method Not Allowed"})
        if path not in routes(s.knobs.version) and path != "/v1/models":
            return self.send_json(404, {"detail": "Not Found"})
        if path in ("/health", "/health_generate"):
            # its 1-token generation waits on the schedulers: a lost one never answers it; 0.5.15+ end the
            # process meanwhile (the SIGQUIT handler's sleep blocks the event loop until then)
            while s.crashing or (s.knobs.at_least("0.5.15") and s.lost_scheduler()):
                time.sleep(0.1)
            if s.phase != "ready" or s.is_draining():
                return self.send_empty(503)
            s.first_generate()  # the real one runs a 1-token generation: a generate request
            if s.scheduler_lost:  # no scheduler answers that generation: 503 (after up to 20 s in the real one)
                time.sleep(s.knobs.health_seconds)
                s.unhealthy = True
                return self.send_empty(503)
            # its generation goes to the schedulers; any output of theirs after it began (another request's token
            # too) is an answer, looked for every second until SGLANG_HEALTH_CHECK_TIMEOUT (every version's
            # http_server.py health_generate: `tokenizer_manager.last_receive_tstamp > tic`), else 503 (UnHealthy)
            tic = time.time()
            threading.Thread(target=s.step, daemon=True).start()
            while time.time() < tic + s.knobs.health_check_timeout:
                time.sleep(s.knobs.health_seconds)
                if s.last_receive > tic:
                    s.unhealthy = False  # `server_status = ServerStatus.Up` (every version's health_generate)
                    return self.send_empty(200 if not s.is_draining() else 503)
                if s.scheduler_lost:
                    break  # a scheduler is gone: none of its outputs will come
            s.unhealthy = True
            return self.send_empty(503)
        if path == "/ready":
            return self.send_empty(200 if s.phase == "ready" and not s.is_draining() else 503)
        if path in ("/get_model_info", "/model_info"):
            return self.send_json(200, {
                "model_path": s.args.model_path,
                "tokenizer_path": s.args.tokenizer_path or s.args.model_path,
                "is_generation": True,
                "preferred_sampling_params": None,
                "weight_version": "default",
            })
        if path == "/v1/models":
            return self.send_json(200, {"object": "list", "data": [{
                "id": s.served_model_name, "object": "model", "created": int(s.started),
                "owned_by": "sglang", "root": s.served_model_name, "max_model_len": s.args.context_length or 32768,
            }]})
        if path in ("/server_info", "/get_server_info"):
            info = {k: v for k, v in vars(s.args).items() if k != "api_key"}
            info.update({"version": s.knobs.version, "internal_states": [{"last_gen_throughput": 0.0}]})
            return self.send_json(200, info)
        return self.send_json(404, {"detail": "Not Found"})

    # --- POST ----------------------------------------------------------------------------
    def do_POST(self):  # pylint: disable=invalid-name
        if not self.authorised():
            return
        path = self.path.split("?", 1)[0]
        req = self.body()
        if req is None:
            return self.send_json(400, {"error": {"message": "invalid JSON body"}})
        if path == "/generate":
            return self.generate(req)
        if path == "/v1/completions":
            return self.completions(req)
        return self.send_json(404, {"detail": "Not Found"})

    def tokens(self, n, prompt_tokens=1):
        """Yields n tokens at the server's pace, each an output of the scheduler's, the first after the prompt's
        prefill, counting the request as in flight."""
        s = self.srv
        s.first_generate()
        with s.lock:
            s.inflight += 1
        try:
            while s.scheduler_lost:  # no scheduler answers: the request waits for ever
                time.sleep(1)
            s.step(prompt_tokens * s.knobs.prefill_seconds_per_token)
            for i in range(n):
                time.sleep(s.knobs.token_seconds)
                if i:
                    s.step()
                yield " tok%d" % i
        finally:
            with s.lock:
                s.inflight -= 1

    def generate(self, req):
        params = req.get("sampling_params") or {}
        n = int(params.get("max_new_tokens", 16))
        prompt = req.get("text") or ""
        rid = uuid.uuid4().hex
        meta = {"id": rid, "prompt_tokens": max(1, len(str(prompt).split())), "completion_tokens": 0,
                "cached_tokens": 0, "finish_reason": None}
        if "empty_generation" in self.srv.knobs.faults:
            # the first token is the end of sequence (id 0 here): not in the text, one completion token
            for dummy in self.tokens(1):
                pass
            meta.update(completion_tokens=1, finish_reason={"type": "stop", "matched": 0})
            if not req.get("stream"):
                return self.send_json(200, {"text": "", "output_ids": [0], "meta_info": meta})
            return self.stream([("", meta)])
        if not req.get("stream"):
            text = "".join(self.tokens(n, meta["prompt_tokens"]))
            meta.update(completion_tokens=n, finish_reason={"type": "length", "length": n})
            return self.send_json(200, {"text": text, "output_ids": list(range(10, 10 + n)), "meta_info": meta})
        return self.stream(self.chunks(n, meta))

    def chunks(self, n, meta):
        text = ""
        for i, tok in enumerate(self.tokens(n, meta["prompt_tokens"])):
            text += tok
            meta["completion_tokens"] = i + 1
            if i + 1 == n:
                meta["finish_reason"] = {"type": "length", "length": n}
            yield text, meta

    def stream(self, chunks):
        """SSE: `data: {"text": ..., "meta_info": ...}` per chunk, then `data: [DONE]`."""
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Connection", "close")
        self.end_headers()
        for text, meta in chunks:
            self.wfile.write(b"data: " + json.dumps({"text": text, "meta_info": meta}).encode() + b"\n\n")
            self.wfile.flush()
        self.wfile.write(b"data: [DONE]\n\n")
        self.wfile.flush()
        self.close_connection = True
        return None

    def completions(self, req):
        n = int(req.get("max_tokens", 16))
        prompt_tokens = max(1, len(str(req.get("prompt", "")).split()))
        text = "".join(self.tokens(n, prompt_tokens))
        return self.send_json(200, {
            "id": uuid.uuid4().hex, "object": "text_completion", "created": int(time.time()),
            "model": self.srv.served_model_name,
            "choices": [{"index": 0, "text": text, "logprobs": None, "finish_reason": "length"}],
            "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": n, "total_tokens": prompt_tokens + n},
        })


class DummyHealthHandler(Handler):
    """The dummy health server of a rank >= 1 node (sglang/_double/nodes.py DUMMY_ROUTES): its GET routes answer 200
    whatever the model does, everything else is FastAPI's 404 (405 for a route asked with another method)."""

    def do_GET(self):  # pylint: disable=invalid-name
        if self.path.split("?", 1)[0] in DUMMY_ROUTES:
            return self.send_empty(200)
        return self.send_json(404, {"detail": "Not Found"})

    def do_POST(self):  # pylint: disable=invalid-name
        if self.path.split("?", 1)[0] in DUMMY_ROUTES:
            return self.send_json(405, {"detail": "Method Not Allowed"})
        return self.send_json(404, {"detail": "Not Found"})
