"""What a server runs, captured from /proc."""
import os
import shlex
import sys

from ansible_collections.inferops.sglang.plugins.module_utils._server import capture as _capture
from tests.unit.conftest import free_port
from ..conftest import wait_listening


def test_capture_resolves_a_relative_python_after_activate(shell, tmp_path):
    venv_bin = os.path.dirname(sys.executable)
    port = free_port()
    shell("export PATH=%s:$PATH API_TOKEN=s3cret; python -m sglang.launch_server --model-path /models/m --tp 1 "
          "--port %d --api-key k3y > s.log 2>&1 & wait" % (shlex.quote(venv_bin), port))
    (server,) = wait_listening(port)
    cap = _capture.capture(server)
    assert cap["argv"][0] == "python"
    assert cap["argv0_resolved"] == os.path.join(venv_bin, "python")
    assert cap["exe"] == os.path.realpath(sys.executable) and cap["argv0_matches_exe"]
    assert cap["cwd"] == str(tmp_path) and cap["user"] == "root"
    assert cap["environment"]["API_TOKEN"] == "s3cret" and cap["argv"][-2:] == ["--api-key", "k3y"]
