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

# A parent -> child -> grandchild; the grandchild calls setsid and is reparented when the child exits.
ESCAPING_GRANDCHILD = r'''
import json, os, sys, time
marker, ready = sys.argv[1], sys.argv[2]
r, w = os.pipe()
if os.fork() == 0:                      # child
    if os.fork() == 0:                  # grandchild
        os.setsid()
        os.write(w, str(os.getpid()).encode())
        time.sleep(600)
    os._exit(0)
os.wait()
gc = int(os.read(r, 32))
json.dump({"pids": {"parent": os.getpid(), "grandchild": gc}}, open(ready, "w"))
time.sleep(600)
'''

# A subreaper whose grandchild is orphaned by its child and adopted by it.
SUBREAPER = r'''
import ctypes, json, os, sys, time
marker, ready = sys.argv[1], sys.argv[2]
ctypes.CDLL(None).prctl(36, 1, 0, 0, 0)   # PR_SET_CHILD_SUBREAPER
r, w = os.pipe()
if os.fork() == 0:
    if os.fork() == 0:
        os.set_inheritable(w, True)
        os.execv(sys.executable, [sys.executable, "-c", "import os,time; os.write(%d, str(os.getpid()).encode()); time.sleep(600)" % w, "orphan-of-" + marker])
    os._exit(0)
os.wait()
orphan = int(os.read(r, 32))
json.dump({"pids": {"subreaper": os.getpid(), "orphan": orphan}}, open(ready, "w"))
time.sleep(600)
'''

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
