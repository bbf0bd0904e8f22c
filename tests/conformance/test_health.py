"""The health check the double models for a hang and a long prefill, read from each real wheel's
sglang/srt/entrypoints/http_server.py (`health_generate`, the handler of both /health and /health_generate): it waits
SGLANG_HEALTH_CHECK_TIMEOUT (default 20) for any output of the schedulers after it began (last_receive_tstamp), looked
at every second; then 200 with the server Up again, else 503 with the server UnHealthy. The double's http.py and
config.py must say the same (its timeout knob is that variable, with that default)."""
import ast
import os
import re
import signal
import subprocess
import sys

from tests.conformance.conftest import DOUBLE, double_env, get, wait_for
from tests.helpers import free_port

HTTP = "sglang/srt/entrypoints/http_server.py"


def health_generate(wheel):
    """The source of the wheel's health_generate and the module's HEALTH_CHECK_TIMEOUT assignment."""
    text = wheel.text(HTTP)
    tree = wheel.tree(HTTP)
    func = [n for n in ast.walk(tree) if isinstance(n, ast.AsyncFunctionDef) and n.name == "health_generate"]
    assert len(func) == 1, "%s: one health_generate, found %d" % (HTTP, len(func))
    paths = [d.args[0].value for d in func[0].decorator_list if isinstance(d, ast.Call) and d.args
             and isinstance(d.args[0], ast.Constant)]
    timeout = [ast.get_source_segment(text, n) for n in tree.body if isinstance(n, ast.Assign)
               and any(isinstance(t, ast.Name) and t.id == "HEALTH_CHECK_TIMEOUT" for t in n.targets)]
    return ast.get_source_segment(text, func[0]), paths, timeout


def test_the_health_check_waits_for_any_output_of_the_schedulers(wheel, version):
    source, paths, timeout = health_generate(wheel)
    assert sorted(paths) == ["/health", "/health_generate"], paths
    assert timeout == ['HEALTH_CHECK_TIMEOUT = int(os.getenv("SGLANG_HEALTH_CHECK_TIMEOUT", 20))'], timeout
    wait = source[source.index("while time.time() < tic + HEALTH_CHECK_TIMEOUT:"):]
    assert re.search(r"await asyncio\.sleep\(1\)\s+if _global_state\.tokenizer_manager\.last_receive_tstamp > tic:",
                     wait), "%s %s: the wait for any output after tic" % (version, HTTP)
    up, down = wait.index("ServerStatus.Up"), wait.index("ServerStatus.UnHealthy")
    assert up < wait.index("status_code=200") < down < wait.rindex("status_code=503"), version

    double = (DOUBLE / "sglang" / "_double" / "http.py").read_text()
    config = (DOUBLE / "sglang" / "_double" / "config.py").read_text()
    assert 'int(env.get("SGLANG_HEALTH_CHECK_TIMEOUT", "20"))' in config
    assert "s.last_receive > tic" in double and "s.unhealthy = False" in double and "s.unhealthy = True" in double


def test_the_double_answers_once_a_stopped_scheduler_runs_again(version, tmp_path):
    """Run as the version: a stopped scheduler is no answer within the timeout (503); running again, 200."""
    port = free_port()
    env = double_env(version, SGLANG_HEALTH_CHECK_TIMEOUT="1")
    proc = subprocess.Popen([sys.executable, "-m", "sglang.launch_server", "--model-path", str(tmp_path), "--tp", "2",
                             "--port", str(port)], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    try:
        wait_for(lambda: get(port, "/health") == 200, 30)
        scheduler = wait_for(lambda: _child_titled(proc.pid, "sglang::scheduler_TP0"), 10)
        os.kill(scheduler, signal.SIGSTOP)
        try:
            assert get(port, "/health_generate") == 503
        finally:
            os.kill(scheduler, signal.SIGCONT)
        assert get(port, "/health_generate") == 200
    finally:
        proc.kill()
        proc.wait()


def _child_titled(pid, title):
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open("/proc/%s/cmdline" % d, "rb") as f:
                    argv0 = f.read().split(b"\0")[0].decode()
                with open("/proc/%s/stat" % d) as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            if ppid == pid and argv0 == title:
                return int(d)
    return None
