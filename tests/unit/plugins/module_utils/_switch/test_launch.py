"""The detached launch: the worker started apart from its launcher, from the module's payload."""
import ast
import os
import subprocess
import sys
import zipfile

from ansible_collections.inferops.sglang.plugins.module_utils import _state_dir
from ansible_collections.inferops.sglang.plugins.module_utils._switch import (
    launch as _switch_launch, outcome as _switch_outcome)

from tests.unit.conftest import COLLECTIONS, ROOT, free_port

PACKAGE = "ansible_collections/inferops/sglang/plugins/module_utils"
DOTTED = PACKAGE.replace("/", ".")
MODULE_UTILS = ROOT / "plugins" / "module_utils"


def test_launch_runs_detached_in_a_session_of_its_own_and_reports(tmp_path):
    """The worker outlives its launcher, and its failure (no systemd here) comes back through the outcome file."""
    plan = dict(id="t3", action="start", port=free_port(), unit="inferops-test-none.service",
                unit_name="inferops-test-none", state_dir=str(tmp_path / "state"), drain=1.0,
                release_strays=False, devices=[str(tmp_path / "nvidia*")])
    script = ("import sys; sys.path.insert(0, %r); from ansible_collections.inferops.sglang.plugins.module_utils._switch "
              "import launch; print(launch.launch(%r, 0)[1][0])" % (COLLECTIONS, plan))
    launcher = subprocess.run([sys.executable, "-c", script], stdout=subprocess.PIPE, universal_newlines=True, check=True)
    assert launcher.stdout.strip() == sys.executable  # the session path, not systemd-run
    outcome = _switch_outcome.wait(plan["state_dir"], "t3", 30)
    assert outcome["finished"] and outcome["pid"] != os.getpid()
    assert [s["step"] for s in outcome["steps"]] == ["verify zero", "release GPUs"]
    assert "systemctl start inferops-test-none.service failed" in outcome["error"]
    assert os.stat(os.path.join(plan["state_dir"], "switch.json")).st_mode & 0o777 == 0o600
    assert os.stat(plan["state_dir"]).st_mode & 0o777 == 0o700


def payload_of(module):
    """The module_utils files a module imports, transitively, as paths under module_utils (a subpackage's
    __init__.py with its modules): what Ansible puts into its payload, found as Ansible finds them (by reading the
    imports, not by running them)."""
    found, todo = set(), [ROOT / "plugins" / "modules" / (module + ".py")]
    while todo:
        for node in ast.walk(ast.parse(todo.pop().read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith(DOTTED):
                base = [p for p in node.module[len(DOTTED):].split(".") if p]
                for name in [a.name for a in node.names]:
                    parts = base + [name] if (MODULE_UTILS.joinpath(*base + [name + ".py"])).exists() else base
                    for depth in range(1, len(parts)):
                        found.add("/".join(parts[:depth]) + "/__init__.py")
                    rel = "/".join(parts) + ".py"
                    if rel not in found:
                        found.add(rel)
                        todo.append(MODULE_UTILS / rel)
    return found


def test_the_worker_runs_from_a_payload_of_what_the_module_imports(tmp_path):
    """Under Ansible the worker runs from a copy of sglang_switch's payload, which holds only the module_utils the
    module imports: the worker and all it needs are among them, and it runs on the standard library alone."""
    names = payload_of("sglang_switch")
    assert "_switch/worker.py" in names
    state = tmp_path / "state"
    state.mkdir()
    zipped = _state_dir.runtime(str(state), "z1")  # where launch() copies the payload
    with zipfile.ZipFile(zipped, "w") as z:
        for depth in range(1, PACKAGE.count("/") + 2):
            z.writestr("/".join(PACKAGE.split("/")[:depth]) + "/__init__.py", "")
        for name in names:
            z.write(str(MODULE_UTILS / name), "%s/%s" % (PACKAGE, name))
    plan = dict(id="z1", action="start", port=free_port(), unit="inferops-test-none.service",
                unit_name="inferops-test-none", state_dir=str(state), drain=1.0, release_strays=False,
                devices=[str(tmp_path / "nvidia*")])
    _switch_outcome.write_json(_state_dir.plan(str(state), "z1"), plan)
    code = _switch_launch.worker_code(zipped, _state_dir.plan(str(state), "z1"))
    worker = subprocess.run([sys.executable, "-I", "-S", "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            universal_newlines=True, timeout=60, check=False)
    assert worker.returncode == 0, worker.stderr
    outcome = _switch_outcome.wait(str(state), "z1", 5)
    assert outcome["finished"] and [s["step"] for s in outcome["steps"]] == ["verify zero", "release GPUs"]
    assert "systemctl start inferops-test-none.service failed" in outcome["error"]
    assert sorted(os.listdir(str(state))) == ["switch.json", "switch.lock"]  # its payload and plan went with it


def test_under_systemd_the_unit_main_process_is_the_one_the_claim_follows(tmp_path, monkeypatch):
    """Under systemd the worker runs as a transient unit's main process: launch() asks systemd which it is and says so
    in the claimed outcome, so that the wait follows that process's life (outcome.pending)."""
    worker = subprocess.Popen(["sleep", "30"])  # the unit's main process, not yet reporting
    calls = []

    def run(argv):
        calls.append(argv[4:] if argv[0] == "timeout" else argv)  # past `timeout -k 2 N`
        return (0, "MainPID=%d\n" % worker.pid, "") if "show" in argv else (0, "", "")
    isdir = os.path.isdir
    monkeypatch.setattr(_switch_launch.os.path, "isdir", lambda path: path == "/run/systemd/system" or isdir(path))
    monkeypatch.setattr(_switch_launch.shutil, "which", lambda name: "/usr/bin/" + name)
    plan = dict(id="u1", action="start", port=30000, unit="sglang.service", unit_name="sglang",
                state_dir=str(tmp_path / "state"))
    try:
        run_id, argv = _switch_launch.launch(plan, 0, run=run)
        unit = "inferops-sglang-switch-30000-u1.service"
        assert run_id == "u1" and argv[:4] == ["systemd-run", "--unit", unit, "--collect"]
        assert calls[1][:2] == ["systemctl", "show"] and calls[1][-1] == unit
        claimed = _switch_outcome.read_json(_state_dir.outcome(plan["state_dir"]))
        assert _switch_outcome.worker(claimed)[0] == worker.pid and _switch_outcome.pending(claimed)
    finally:
        worker.kill()
        worker.wait()
    assert not _switch_outcome.pending(claimed)
