"""Shared-memory segments in /dev/shm as SGLang names them: `leak N`: N segments of a server that is gone (the pid in
their names exists no more), written and closed; `hold`: one segment of this live process (its pid in the name) and
one `sglang_loads_*` (no pid), each mapped and held open, then sleep for ever (what another live server has)."""
import mmap
import os
import secrets
import sys
import time

SHM = "/dev/shm"
GONE = 4000000  # above any pid this host has given (pid_max is 4194304; ps shows none of it)


def segment(name, size=4096):
    fd = os.open(os.path.join(SHM, name), os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
    os.ftruncate(fd, size)
    return fd


if sys.argv[1] == "leak":
    for i in range(int(sys.argv[2])):
        os.close(segment("sgl_shm_%s_%d_%s" % (("mq", "mm")[i % 2], GONE + i, secrets.token_hex(4))))
else:
    held = []
    for name in ("sgl_shm_mq_%d_%s" % (os.getpid(), secrets.token_hex(4)),
                 "sglang_loads_%s_%s.shm" % (secrets.token_hex(6), secrets.token_hex(4))):
        fd = segment(name)
        held.append((name, fd, mmap.mmap(fd, 4096)))
    print(" ".join(name for name, fd, mapped in held), flush=True)
    while True:
        time.sleep(3600)
