"""A small HTTP load balancer for the fleet scenario, with a plain admin API, that records where it routes.

    python balancer.py PORT LOG name=host:port [name=host:port ...]

Requests other than /backends... go round-robin to the enabled backends (header X-Backend says which).
Admin: GET /backends, GET /backends/NAME, POST /backends/NAME/disable|enable.
LOG gets one JSON line per routed request (backend, start, end, status) and per admin change.
"""
import http.client
import itertools
import json
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Pool:
    def __init__(self, backends, log):
        self.lock = threading.Lock()
        self.backends = dict((n, {"address": a, "enabled": True, "in_flight": 0}) for n, a in backends)
        self.turn = itertools.cycle(sorted(self.backends))
        self.log = open(log, "a", buffering=1)

    def record(self, **event):
        with self.lock:
            self.log.write(json.dumps(event) + "\n")

    def pick(self):
        with self.lock:
            for dummy in range(len(self.backends)):
                name = next(self.turn)
                b = self.backends[name]
                if b["enabled"]:
                    b["in_flight"] += 1
                    return name, b["address"]
        return None, None

    def done(self, name):
        with self.lock:
            self.backends[name]["in_flight"] -= 1


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *args):  # pylint: disable=arguments-differ
        pass

    def reply(self, code, body, headers=()):
        if not isinstance(body, bytes):
            body, headers = json.dumps(body).encode(), list(headers) + [("Content-Type", "application/json")]
        data = body
        self.send_response(code)
        for k, v in headers:
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def admin(self, method):
        pool = self.server.pool
        parts = self.path.strip("/").split("/")
        if parts == ["backends"] and method == "GET":
            return self.reply(200, pool.backends)
        if len(parts) >= 2 and parts[1] in pool.backends:
            name = parts[1]
            if len(parts) == 2 and method == "GET":
                return self.reply(200, dict(pool.backends[name], name=name))
            if len(parts) == 3 and parts[2] in ("enable", "disable") and method == "POST":
                with pool.lock:
                    pool.backends[name]["enabled"] = parts[2] == "enable"
                pool.record(event=parts[2], backend=name, t=time.time())
                return self.reply(200, dict(pool.backends[name], name=name))
        return self.reply(404, {"error": "no such backend or action: %s %s" % (method, self.path)})

    def proxy(self, method):
        pool = self.server.pool
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0)) if method == "POST" else None
        start = time.time()  # before the pick: a request routed to a backend started before it was disabled
        name, address = pool.pick()
        if name is None:
            return self.reply(503, {"error": "no backend in the pool"})
        status = 0
        try:
            host, port = address.rsplit(":", 1)
            conn = http.client.HTTPConnection(host, int(port), timeout=60)
            headers = dict((k, v) for k, v in self.headers.items() if k.lower() in ("content-type", "authorization"))
            conn.request(method, self.path, body=body, headers=headers)
            r = conn.getresponse()
            data = r.read()
            status = r.status
            conn.close()
            self.reply(status, data, [("X-Backend", name), ("Content-Type", r.getheader("Content-Type", "text/plain"))])
        except OSError as e:
            self.reply(502, {"error": str(e), "backend": name}, [("X-Backend", name)])
            status = 502
        finally:
            pool.done(name)
            pool.record(event="route", backend=name, start=start, end=time.time(), status=status)

    def do_GET(self):  # pylint: disable=invalid-name
        return self.admin("GET") if self.path.startswith("/backends") else self.proxy("GET")

    def do_POST(self):  # pylint: disable=invalid-name
        return self.admin("POST") if self.path.startswith("/backends") else self.proxy("POST")


def main():
    port, log = int(sys.argv[1]), sys.argv[2]
    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    server.daemon_threads = True
    server.pool = Pool([a.split("=", 1) for a in sys.argv[3:]], log)
    server.serve_forever()


if __name__ == "__main__":
    main()
