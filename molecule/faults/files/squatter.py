"""F6c: another program that takes port 30000 while the new service loads, answering 404 to everything (what a real
0.5.15 server whose port was taken talked to, on an H200). It binds the port once the switch has started
sglang-30000.service (activating) and holds it until the rollback has stopped the unit (its outcome file names the
step), so that no restart of the unit binds the port and serves in between, however long the rollback takes to
come; the rollback's check that the port is free waits for it. It writes when it held the port to
/root/squatter.json."""
import http.server
import json
import subprocess
import threading
import time

UNIT = "sglang-30000.service"
OUTCOME = "/var/lib/inferops/cutover/30000/switch.json"


def rollback_stopped_the_unit():
    try:
        with open(OUTCOME) as f:
            outcome = json.load(f)
    except (OSError, ValueError):  # not there yet, or read while it was replaced
        return False
    return outcome.get("action") == "rollback" and any(s.get("step") == "stop server" for s in outcome.get("steps", []))


def state():
    return subprocess.run(["systemctl", "show", "-p", "ActiveState", "--value", UNIT], stdout=subprocess.PIPE,
                          universal_newlines=True, check=False).stdout.strip()


class NotFound(http.server.BaseHTTPRequestHandler):
    def do_GET(self):  # pylint: disable=invalid-name
        self.send_response(404)
        self.send_header("Content-Length", "0")
        self.end_headers()

    do_POST = do_GET

    def log_message(self, *args):  # pylint: disable=arguments-differ
        pass


while state() != "activating":
    time.sleep(0.05)
httpd = http.server.ThreadingHTTPServer(("0.0.0.0", 30000), NotFound)
bound = time.time()
threading.Thread(target=httpd.serve_forever, daemon=True).start()
while not rollback_stopped_the_unit():
    time.sleep(0.05)
httpd.shutdown()
httpd.server_close()
with open("/root/squatter.json", "w") as f:
    json.dump({"bound": bound, "let_go": time.time()}, f)
