# -*- coding: utf-8 -*-
# Copyright: inferops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""An SGLang server's start-up phases over HTTP: loading (port closed), warm-up, ready."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import socket
import time

from http.client import HTTPConnection, HTTPSConnection, HTTPException
from urllib.parse import urlsplit

POLL = 0.1             # seconds between looks; a refused connect or a /ready answer costs next to nothing
REQUEST_TIMEOUT = 30   # /health runs a generation: up to SGLANG_HEALTH_CHECK_TIMEOUT (20 s) on the server


class Answer:
    def __init__(self, status, body=b"", seconds=0.0, error=None):
        self.status = status      # 0: nothing listens (refused); None: no answer (timeout, reset)
        self.body = body
        self.seconds = seconds
        self.error = error

    def json(self):
        try:
            return json.loads(self.body.decode("utf-8", "replace"))
        except ValueError:
            return None

    def as_dict(self):
        return {"status": self.status, "seconds": round(self.seconds, 3)}


class Server:
    """An SGLang server at url. With an api_key, a request that may carry it (secret=True) is sent with the key only
    once owner(sock) - None when the process that accepted this connection is the server the key is for, else why
    not - passed: a local server must be given one (ValueError otherwise), since any local user can bind its port
    while the model loads. A remote server (not on this host: its sockets cannot be looked at) gets the key as given."""

    def __init__(self, url, api_key=None, owner=None):
        self.url = url.rstrip("/")
        parts = urlsplit(self.url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError("url %r is not an http(s) URL such as http://127.0.0.1:30000" % url)
        self.host = parts.hostname
        self.port = parts.port or (443 if parts.scheme == "https" else 80)
        self.base = parts.path.rstrip("/")
        self.conn_class = HTTPSConnection if parts.scheme == "https" else HTTPConnection
        self.api_key = api_key
        if api_key and owner is None and self.is_local():
            raise ValueError("an API key for the server at %s on this host goes only to the server's own listener: "
                             "say whose it is (its unit or pid)" % self.url)
        self.owner = owner

    def is_local(self):
        """Whether the server is on this host (a loopback or wildcard address): its listener can then be looked at."""
        return self.host in ("localhost", "0.0.0.0", "::") or self.host.startswith("127.") or self.host == "::1"

    def port_open(self, timeout=1.0):
        try:
            with socket.create_connection((self.host, self.port), timeout=timeout):
                return True
        except OSError:
            return False

    def request(self, path, body=None, timeout=REQUEST_TIMEOUT, secret=True):
        """The answer to GET path (POST with a JSON body); the API key goes with it when secret and the owner check
        passed on this very connection (status None, error saying why, when it did not)."""
        headers = {"Accept": "application/json"}
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        t0 = time.monotonic()
        conn = self.conn_class(self.host, self.port, timeout=timeout)
        try:
            if self.api_key and secret:
                conn.connect()
                why = self.owner(conn.sock) if self.owner is not None else None
                if why:
                    return Answer(None, seconds=time.monotonic() - t0, error="the API key was not sent: " + why)
                headers["Authorization"] = "Bearer " + self.api_key
            conn.request("POST" if data else "GET", self.base + path, body=data, headers=headers)
            r = conn.getresponse()
            return Answer(r.status, r.read(), time.monotonic() - t0)
        except ConnectionRefusedError as e:
            return Answer(0, seconds=time.monotonic() - t0, error=str(e))
        except (OSError, HTTPException, socket.timeout) as e:
            return Answer(None, seconds=time.monotonic() - t0, error=str(e))
        finally:
            conn.close()


class NotReady(Exception):
    def __init__(self, msg, result):
        Exception.__init__(self, msg)
        self.result = result


def model_names(answer):
    """The model ids of a /v1/models answer (empty when it is not one)."""
    data = answer.json() if answer.status == 200 else None
    return [m.get("id") for m in data.get("data", []) if isinstance(m, dict)] if isinstance(data, dict) else []


def server_version(server, timeout=10.0):
    """The SGLang version the server says it runs: the `version` of its /server_info (0.5.9 and later), else of
    /get_server_info (every version); None when neither answers with one. Nothing else of the answer is kept: it
    holds the server's arguments, its --api-key among them."""
    for path in ("/server_info", "/get_server_info"):
        answer = server.request(path, timeout=timeout)
        data = answer.json() if answer.status == 200 else None
        if isinstance(data, dict) and isinstance(data.get("version"), str):
            return data["version"]
        if answer.status != 404:
            return None
    return None


def output_tokens(answer):
    """How many tokens a 200 answer to POST /generate generated (meta_info.completion_tokens, else the length of
    output_ids), 0 when it is no generation. Not its text: a model whose first token ends the sequence answers 200
    with text "" and one token (seen on a real 0.5.15), and that is a working server."""
    data = answer.json() if answer.status == 200 else None
    if not isinstance(data, dict) or not isinstance(data.get("text"), str):
        return 0
    meta = data.get("meta_info") if isinstance(data.get("meta_info"), dict) else {}
    count = meta.get("completion_tokens")
    if isinstance(count, int) and not isinstance(count, bool):
        return max(count, 0)
    ids = data.get("output_ids")
    return len(ids) if isinstance(ids, list) else 0


def ready_path_of(probe):
    """The path that tells readiness, from an answer to /ready: /ready where the server has an open one; /health
    where it has none (404, SGLang before 0.5.23) or keeps it behind --api-key (401, 0.5.5-0.5.15 without the key)."""
    return "/health" if probe.status in (401, 404) else "/ready"


def wait(server, timeout=900.0, ready="auto", models=True, generate=False, checks=(), gates=(), check_every=1.0,
         poll=POLL, clock=time.monotonic):
    """Wait until the server is ready; raise NotReady when it cannot be, or when timeout passes.

    ready: 'auto' (/ready where the server has it, else /health), or a path that must answer 200.
    checks: callables returning None while the server may still come up, else the reason it cannot.
    gates: callables asked once the ready path answers 200, returning None when that answer counts, else what is
    still awaited (the listener is another process; the unit is still activating): the wait goes on.
    """
    t0 = clock()
    res = {"phases": {}, "attempts": 0, "endpoints": {}, "ready_path": None, "model": None}
    phase, phase_t = "loading", t0
    ready_path = None if ready == "auto" else ready
    next_check = t0

    def done(name):
        now = clock()
        res["phases"][name] = round(now - phase_t, 3)
        return now

    while True:
        now = clock()
        if now >= next_check:
            for check in checks:
                why = check()
                if why:
                    res["elapsed"] = round(now - t0, 3)
                    res["phase"] = phase
                    raise NotReady(why, res)
            next_check = now + check_every
        if now - t0 >= timeout:
            res["elapsed"] = round(now - t0, 3)
            res["phase"] = phase
            awaiting = "; awaiting: %s" % "; ".join(res["awaiting"]) if res.get("awaiting") else ""
            raise NotReady("the server at %s was not ready within %.0f s (still %s%s)" % (
                server.url, timeout, phase, awaiting), res)
        res["attempts"] += 1
        if phase == "loading":
            if server.port_open():
                phase_t = done("loading")
                phase = "warmup"
                continue
        else:
            # /ready and /health answer without the key on every version: the automatic probes never carry it
            if ready_path is None:
                probe = server.request("/ready", secret=False)
                ready_path = ready_path_of(probe)
                answer = probe if ready_path == "/ready" else server.request(ready_path, secret=False)
            else:
                answer = server.request(ready_path, secret=ready != "auto")
            res["endpoints"][ready_path] = answer.as_dict()
            if answer.status == 200:
                awaited = [why for why in (gate() for gate in gates) if why]
                if not awaited:
                    res.pop("awaiting", None)
                    done("warmup")
                    break
                res["awaiting"] = awaited
            if answer.status == 0:  # the port closed again: the server went back to loading (or died)
                phase, phase_t = "loading", clock()
        time.sleep(poll)
    res["ready_path"] = ready_path
    res["ready_after"] = round(clock() - t0, 3)
    if models:
        answer = server.request("/v1/models")
        res["endpoints"]["/v1/models"] = answer.as_dict()
        if answer.status != 200:
            hint = " (the server wants an API key: give api_key)" if answer.status == 401 else \
                ": %s" % answer.error if answer.error else ""
            raise NotReady("%s answered /v1/models with %s%s" % (server.url, answer.status, hint), res)
        names = model_names(answer)
        res["model"] = names[0] if names else None
        res["models"] = names
        res["version"] = server_version(server)
    if generate:
        answer = server.request("/generate", {"text": "Say OK.", "sampling_params": {"max_new_tokens": 4, "temperature": 0}})
        res["endpoints"]["/generate"] = answer.as_dict()
        tokens = output_tokens(answer)
        if not tokens:
            raise NotReady("%s answered a test generation with %s and no output tokens%s" % (
                server.url, answer.status, ": %s" % answer.error if answer.error else ""), res)
        res["generated"] = answer.json()["text"]
        res["generated_tokens"] = tokens
    res["elapsed"] = round(clock() - t0, 3)
    return res
