"""Makes the collection importable as ansible_collections.inferops.sglang, and spawns real processes."""
import os
import signal
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest

# the tests import free_port and wait_for from here
from tests.helpers import free_port, wait_for  # noqa: F401  pylint: disable=unused-import

ROOT = Path(__file__).resolve().parents[2]
_tree = Path(tempfile.mkdtemp(prefix="inferops-unit-"))
(_tree / "ansible_collections" / "inferops").mkdir(parents=True)
(_tree / "ansible_collections" / "inferops" / "sglang").symlink_to(ROOT)
COLLECTIONS = str(_tree)
sys.path.insert(0, COLLECTIONS)


class Spawner:
    """Starts real processes from small Python programs and cleans up everything they leave."""

    def __init__(self, tmp_path):
        self.tmp = tmp_path
        self.marker = "inferops-test-%d-%s" % (os.getpid(), tmp_path.name)
        self.procs = []

    def python(self, code, *args, argv0=None, new_session=False, **kw):
        """Run `python -c code marker args...`; the marker in argv makes leftovers findable."""
        script = self.tmp / ("p%d.py" % len(self.procs))
        script.write_text(textwrap.dedent(code))
        cmd = [sys.executable, str(script), self.marker, *args]
        p = subprocess.Popen(cmd, executable=sys.executable, start_new_session=new_session,
                             stdin=subprocess.DEVNULL, **kw)
        if argv0:
            p.args = cmd
        self.procs.append(p)
        return p

    def cleanup(self):
        from ansible_collections.inferops.sglang.plugins.module_utils import _procfs
        sessions = set(p.pid for p in self.procs)  # those started in a session of their own lead it
        for p in self.procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        for proc in _procfs.snapshot().values():
            if self.marker in proc.cmdline or proc.sid in sessions or \
                    str(self.tmp) in " ".join(_procfs.open_files(proc.pid).values()):
                try:
                    os.kill(proc.pid, signal.SIGKILL)
                except OSError:
                    pass


@pytest.fixture
def spawn(tmp_path):
    s = Spawner(tmp_path)
    yield s
    s.cleanup()
