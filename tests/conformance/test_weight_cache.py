"""The double's weight cache (0.5.17 on) against the real wheels' sglang/srt/weight_cache/, read and never imported:
which versions have it, its paths, the daemon's options, CacheConfig's fields, the quantization allowlist, and the
text of the messages the double prints. Behaviour with real processes: tests/sglang_double/tests/test_weight_cache.py."""
import ast
import importlib
import re
import subprocess
import sys

import pytest

from tests.conformance.conftest import DOUBLE, double_env
from tests.conformance.versions import VERSIONS

WC = "sglang/srt/weight_cache/"
DOUBLE_WC = DOUBLE / "sglang" / "srt" / "weight_cache"


def has_cache(wheel):
    return WC + "daemon.py" in wheel.names


def test_the_weight_cache_exists_from_0517_as_in_the_wheels(wheel, version):
    r = subprocess.run([sys.executable, "-m", "sglang.srt.weight_cache.daemon", "--help"], env=double_env(version),
                       capture_output=True, text=True, timeout=60, check=False)
    if has_cache(wheel):
        assert r.returncode == 0 and "--model-path" in r.stdout, r.stderr
    else:
        assert r.returncode == 1 and "No module named 'sglang.srt.weight_cache'" in r.stderr


def _double(version, monkeypatch):
    monkeypatch.setenv("SGLANG_DOUBLE_VERSION", version)
    monkeypatch.syspath_prepend(str(DOUBLE))
    for name in [n for n in sys.modules if n == "sglang" or n.startswith("sglang.")]:
        monkeypatch.delitem(sys.modules, name)
    protocol = importlib.import_module("sglang.srt.weight_cache.protocol")
    daemon = importlib.import_module("sglang.srt.weight_cache.daemon")
    return protocol, daemon


@pytest.fixture
def cached(wheel, version, monkeypatch):
    if not has_cache(wheel):
        pytest.skip("sglang %s has no weight cache" % version)
    monkeypatch.delenv("SGLANG_DOUBLE_WEIGHT_CACHE_ROOT", raising=False)
    for env in ("SGLANG_WEIGHT_CACHE_SOCKET_TEMPLATE", "SGLANG_WEIGHT_CACHE_READY_TEMPLATE", "CUDA_VISIBLE_DEVICES"):
        monkeypatch.delenv(env, raising=False)
    return _double(version, monkeypatch)


def module_constants(wheel, path):
    return {t.id: n.value.value for n in wheel.tree(path).body if isinstance(n, ast.Assign)
            and isinstance(n.value, ast.Constant) for t in n.targets if isinstance(t, ast.Name)}


def env_defaults(wheel):
    """environ.py's `NAME = EnvStr("default")` of the weight cache's templates."""
    found = {}
    for node in ast.walk(wheel.tree("sglang/srt/environ.py")):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call) and node.value.args \
                and isinstance(node.value.args[0], ast.Constant) and isinstance(node.targets[0], ast.Name) \
                and node.targets[0].id.startswith("SGLANG_WEIGHT_CACHE_"):
            found[node.targets[0].id] = node.value.args[0].value
    return found


def test_the_daemons_paths(wheel, version, cached):
    protocol, dummy = cached
    consts = module_constants(wheel, WC + "protocol.py")
    if "WEIGHT_CACHE_SOCKET_TEMPLATE" in consts:  # 0.5.17: fixed paths, keyed by global rank
        assert protocol.get_socket_path(3) == consts["WEIGHT_CACHE_SOCKET_TEMPLATE"].format(global_rank=3)
        assert protocol.get_ready_path(3) == consts["WEIGHT_CACHE_READY_TEMPLATE"].format(global_rank=3)
        assert protocol.daemon_key(2, 1, 1, 0) == 3  # tp_size * pp_rank + tp_rank
    else:  # 0.5.23: the environment's templates, keyed by the GPU's UUID
        defaults = env_defaults(wheel)
        assert defaults == {protocol.SOCKET_TEMPLATE_ENV: protocol.DEFAULT_SOCKET_TEMPLATE_0523,
                            protocol.READY_TEMPLATE_ENV: protocol.DEFAULT_READY_TEMPLATE_0523}
        uuid = protocol.daemon_key(1, 0, 0, 0)
        assert uuid.startswith("GPU-") and protocol.get_socket_path(uuid) == defaults[protocol.SOCKET_TEMPLATE_ENV] \
            .format(device_uuid=uuid)
        assert "device_uuid" in wheel.text(WC + "daemon.py") and "get_device_uuid(gpu_id)" in wheel.text(WC + "daemon.py")


def wheel_daemon_options(wheel):
    """The option strings of the daemon's own parser: `__main__`'s add_argument calls (0.5.17) or
    WeightCacheDaemonArgs.add_cli_args (0.5.23)."""
    tree = wheel.tree(WC + "daemon.py")
    scope = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "WeightCacheDaemonArgs"] or \
        [n for n in tree.body if isinstance(n, ast.If)]
    return sorted(a.value for n in ast.walk(scope[0]) if isinstance(n, ast.Call)
                  and getattr(n.func, "attr", "") == "add_argument" for a in n.args if isinstance(a, ast.Constant))


def test_the_daemons_own_options(wheel, version, cached):
    dummy, daemon = cached
    parser = daemon._worker_parser_0523() if "WeightCacheDaemonArgs" in wheel.text(WC + "daemon.py") \
        else daemon._parser_0517()
    ours = sorted(o for a in parser._actions for o in a.option_strings if o not in ("-h", "--help"))
    assert ours == wheel_daemon_options(wheel)


def test_cache_config_fields(wheel, version, cached):
    protocol, dummy = cached
    cls = [n for n in wheel.tree(WC + "protocol.py").body if isinstance(n, ast.ClassDef) and n.name == "CacheConfig"][0]
    fields = tuple(n.target.id for n in cls.body if isinstance(n, ast.AnnAssign))
    assert protocol.cache_fields(version) == fields


def test_the_quantization_allowlist(wheel, version, cached):
    protocol, dummy = cached
    node = [n for n in wheel.tree(WC + "protocol.py").body if isinstance(n, ast.Assign)
            and getattr(n.targets[0], "id", "") == "IPC_QUANT_ALLOWLIST"][0]
    assert [k.value for k in node.value.keys] == list(protocol.IPC_QUANT_ALLOWLIST)
    assert "weight_block_size" in ast.unparse([n for n in wheel.tree(WC + "protocol.py").body if isinstance(
        n, ast.FunctionDef) and n.name == "_fp8_round_trips_via_ipc"][0])
    protocol.check_ipc_quant_support("", None, where="client")
    protocol.check_ipc_quant_support("fp8", {"weight_block_size": [128, 128]}, where="client")
    for method, cfg in (("fp8", {}), ("awq", {}), ("gptq_marlin", {})):
        with pytest.raises(protocol.UnsupportedQuantForIPCError):
            protocol.check_ipc_quant_support(method, cfg, where="client")


def fragments(tree, marker):
    """The constant parts of the first f-string (or string) holding `marker`, in order."""
    docs = {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant)}
    for node in ast.walk(tree):
        if id(node) in docs:
            continue
        if isinstance(node, ast.JoinedStr):
            parts = [v.value for v in node.values if isinstance(v, ast.Constant)]
            if marker in "".join(parts):
                return parts
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and marker in node.value:
            return [node.value]
    return None


# (the wheel's file, a marker of the message) -> the double's file; each constant part of the wheel's message must be
# in the double's message of that marker (the double's wording may interpolate what a version spells out)
MESSAGES = [
    ("protocol.py", "is not verified for CUDA IPC", "protocol.py"),
    ("protocol.py", "Verified methods: ", "protocol.py"),
    ("protocol.py", "is already running", "protocol.py"),
    ("protocol.py", "force takeover", "protocol.py"),
    ("protocol.py", "Removed stale daemon file", "protocol.py"),
    ("daemon.py", "sets expandable_segments:True", "daemon.py"),
    ("daemon.py", "Listening on ", "daemon.py"),
    ("daemon.py", "shutting down", "daemon.py"),
    ("daemon.py", "Shutdown complete", "daemon.py"),
    ("daemon.py", "Config mismatch: ", "daemon.py"),
    ("daemon.py", "Loading model from disk", "daemon.py"),
    ("daemon.py", "Model loaded from disk in", "daemon.py"),
    ("daemon.py", "terminated the remaining daemons", "daemon.py"),
    ("daemon.py", "exited prematurely", "daemon.py"),
    ("daemon.py", "did not become ready within", "daemon.py"),
    ("daemon.py", "Launched weight cache daemon", "daemon.py"),
    ("daemon.py", "weight cache daemons on node", "daemon.py"),
    ("daemon.py", "%(asctime)s [Daemon gpu=", "daemon.py"),
    ("ipc_loader.py", "Daemon socket not found", "ipc_loader.py"),
    ("ipc_loader.py", "falling back to disk load", "../../_double/server.py"),
    ("ipc_loader.py", "refused the connection", "ipc_loader.py"),
    ("ipc_loader.py", "Refusing to connect", "ipc_loader.py"),
    ("ipc_loader.py", "Failed to connect to daemon", "ipc_loader.py"),
    ("ipc_loader.py", "Daemon config mismatch!", "ipc_loader.py"),
    ("ipc_loader.py", "Error communicating with daemon", "ipc_loader.py"),
    ("ipc_loader.py", "Requesting weights from daemon", "ipc_loader.py"),
    ("ipc_loader.py", "Zero-copy: mapped", "ipc_loader.py"),
    ("ipc_loader.py", "Started daemon-liveness watchdog", "ipc_loader.py"),
    ("ipc_loader.py", "Loaded model via IPC", "ipc_loader.py"),
    ("ipc_loader.py", "died while this engine holds", "ipc_loader.py"),
]


def _double_tree(rel):
    return ast.parse((DOUBLE_WC / rel).resolve().read_text())


@pytest.mark.parametrize("where,marker,ours", MESSAGES, ids=[m[1] for m in MESSAGES])
def test_the_messages_are_the_wheels(wheel, version, where, marker, ours):
    if not has_cache(wheel):
        pytest.skip("sglang %s has no weight cache" % version)
    theirs = fragments(wheel.tree(WC + where), marker)
    assert theirs is not None, "%s: no message with %r in %s" % (version, marker, where)
    mine = "".join(fragments(_double_tree(ours), marker) or [])
    # the wheel's wording of a rank or a GPU is interpolated in the double ({what}: "rank N" / "GPU <uuid>")
    missing = [p for p in theirs if p.replace("for rank ", "for ").replace("for GPU ", "for ") not in mine]
    assert not missing, "%s %s: %r not in the double's %r" % (version, where, missing, mine)


def test_the_speculative_refusal(wheel, version):
    if not has_cache(wheel):
        pytest.skip("sglang %s has no weight cache" % version)
    paths = [n for n in wheel.names if n == "sglang/srt/server_args.py" or n.startswith("sglang/srt/arg_groups/")]
    theirs = next(f for f in (fragments(wheel.tree(p), "not supported together with speculative") for p in paths) if f)
    mine = fragments(ast.parse((DOUBLE / "sglang" / "srt" / "server_args.py").read_text()),
                     "not supported together with speculative")
    assert "".join(theirs) == "".join(mine)


def test_the_clients_watchdog_interval(wheel, version):
    if not has_cache(wheel):
        pytest.skip("sglang %s has no weight cache" % version)
    consts = module_constants(wheel, WC + "ipc_loader.py")
    knob = re.search(r'"SGLANG_DOUBLE_WEIGHT_CACHE_POLL_SECONDS", "([0-9.]+)"',
                     (DOUBLE / "sglang" / "_double" / "config.py").read_text()).group(1)
    assert consts["_DAEMON_LIVENESS_POLL_INTERVAL"] == float(knob)


def test_every_version_is_covered():
    assert "0.5.17" in VERSIONS
