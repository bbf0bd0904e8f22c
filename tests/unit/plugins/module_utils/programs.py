"""Small programs the tests run as real processes. Each takes: MARKER READY_FILE [args] and writes
JSON to READY_FILE once set up ({"pids": {...}})."""

# A parent whose child ignores SIGTERM.
TREE_WITH_STUBBORN_CHILD = r'''
import json, signal, subprocess, sys, time
marker, ready = sys.argv[1], sys.argv[2]
child = subprocess.Popen([sys.executable, "-c",
    "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)", marker, "child"])
time.sleep(0.2)
json.dump({"pids": {"parent": __import__("os").getpid(), "child": child.pid}}, open(ready, "w"))
time.sleep(600)
'''


def _orphaning(setup, grandchild, keys):
    """A program whose child forks a grandchild and exits, orphaning it: `setup` runs first, `grandchild` (8 spaces
    in) runs in the grandchild and writes its pid to the pipe's w; the ready file names {keys[0]: this program's pid,
    keys[1]: the grandchild's}."""
    return r'''
import ctypes, json, os, sys, time
marker, ready = sys.argv[1], sys.argv[2]
%s
r, w = os.pipe()
if os.fork() == 0:                      # child
    if os.fork() == 0:                  # grandchild
%s
    os._exit(0)
os.wait()
gc = int(os.read(r, 32))
json.dump({"pids": {%r: os.getpid(), %r: gc}}, open(ready, "w"))
time.sleep(600)
''' % (setup, grandchild, keys[0], keys[1])


# A parent -> child -> grandchild; the grandchild calls setsid and is reparented when the child exits.
ESCAPING_GRANDCHILD = _orphaning("", """\
        os.setsid()
        os.write(w, str(os.getpid()).encode())
        time.sleep(600)""", ("parent", "grandchild"))

# A subreaper whose grandchild is orphaned by its child and adopted by it.
SUBREAPER = _orphaning("ctypes.CDLL(None).prctl(36, 1, 0, 0, 0)   # PR_SET_CHILD_SUBREAPER", """\
        os.set_inheritable(w, True)
        os.execv(sys.executable, [sys.executable, "-c",
                 "import os,time; os.write(%d, str(os.getpid()).encode()); time.sleep(600)" % w, "orphan-of-" + marker])""",
                       ("subreaper", "orphan"))

# A parent with a child that exited and was never reaped.
ZOMBIE_PARENT = r'''
import json, os, signal, sys, time
marker, ready = sys.argv[1], sys.argv[2]
pid = os.fork()
if pid == 0:
    os._exit(0)
time.sleep(0.2)
json.dump({"pids": {"parent": os.getpid(), "zombie": pid}}, open(ready, "w"))
time.sleep(600)
'''

# Holds the files named in argv[3:] open.
HOLDER = r'''
import json, os, sys, time
marker, ready = sys.argv[1], sys.argv[2]
held = [open(p, "rb") for p in sys.argv[3:]]
json.dump({"pids": {"holder": os.getpid()}}, open(ready, "w"))
time.sleep(600)
'''

# Runs argv[3:] as a child, reports the child's output; the parent's own argv holds the pattern.
RUNNER = r'''
import json, os, subprocess, sys
marker, ready = sys.argv[1], sys.argv[2]
out = subprocess.run(sys.argv[3:], stdout=subprocess.PIPE, universal_newlines=True).stdout
json.dump({"pids": {"runner": os.getpid()}, "out": out}, open(ready, "w"))
'''

# What a real SGLang 0.5.15 does with a SIGTERM that comes before its first generate request: uvicorn takes it and
# closes the port at once (no 503 ever), and the process lives on until its warm-up thread gives up (about 120 s).
# argv[3]: the port; its argv names sglang.launch_server, as the server's does.
UVICORN_BEFORE_GENERATE = r'''
import json, os, signal, socket, sys, time
marker, ready, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
listener = socket.socket()
listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
listener.bind(("127.0.0.1", port))
listener.listen(16)
signal.signal(signal.SIGTERM, lambda signum, frame: listener.close())
json.dump({"pids": {"server": os.getpid()}}, open(ready, "w"))
time.sleep(120)
'''

# A program that is not an SGLang server, listening on port argv[3] (and answering nothing).
PORT_HOLDER = r'''
import json, os, socket, sys, time
marker, ready, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
listener = socket.socket()
listener.bind(("127.0.0.1", port))
listener.listen(16)
json.dump({"pids": {"holder": os.getpid()}}, open(ready, "w"))
time.sleep(600)
'''
