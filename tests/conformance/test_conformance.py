"""The double, run as each version, agrees with that version's real wheel: every expected value below is read
from the wheel's own source or metadata (tests/conformance/realwheel.py), none is written here."""
import argparse
import ast
import contextlib
import importlib
import importlib.util
import io
import re
import subprocess
import sys
import tomllib

import pytest

from tests.conformance.conftest import DOUBLE, ROOT, double_env, get, stat, tree, wait_for
from tests.conformance.realwheel import DETOKENIZER, DP_CONTROLLER

KEY = "sk-conformance"
INFO_ROUTE = re.compile(r"^/(get_)?(model|server)_info$|^/health|^/ready")
# where the collection, its docs and its tests write command lines
USED_IN = ("plugins", "roles", "docs", "molecule", "tests", "playbooks", "README.md")
FLAG = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]*[a-z0-9]")


# --- the double's own modules, imported as a given version -------------------------------------
@pytest.fixture
def as_version(monkeypatch, version):
    """The double's sglang package imported fresh with SGLANG_DOUBLE_VERSION=version."""
    monkeypatch.setenv("SGLANG_DOUBLE_VERSION", version)
    monkeypatch.syspath_prepend(str(DOUBLE))
    for name in [m for m in sys.modules if m == "sglang" or m.startswith("sglang.")]:
        monkeypatch.delitem(sys.modules, name)
    yield importlib.import_module
    for name in [m for m in sys.modules if m == "sglang" or m.startswith("sglang.")]:
        del sys.modules[name]


# --- metadata ----------------------------------------------------------------------------------
def test_console_scripts(wheel, version, as_version):
    scripts = as_version("sglang._double.config").console_scripts(version)
    assert scripts == wheel.console_scripts()
    declared = tomllib.loads((DOUBLE / "pyproject.toml").read_text())["project"]["scripts"]
    assert {k: declared[k] for k in scripts} == scripts, "pyproject.toml installs them"


def test_sglang_subcommands(wheel, version, tmp_path):
    wanted = set()
    for node in ast.walk(wheel.tree("sglang/cli/main.py")):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "add_parser"
                and node.args and isinstance(node.args[0], ast.Constant)):
            wanted.add(node.args[0].value)
    out = subprocess.run([sys.executable, "-c", "import sys; sys.argv[0] = 'sglang'; "
                          "from sglang.cli.main import main; sys.exit(main())", "--help"],
                         env=double_env(version), stdout=subprocess.PIPE, universal_newlines=True, check=True).stdout
    assert set(re.search(r"\{([a-z,]+)\}", out).group(1).split(",")) == wanted


# --- the parser: module, call shape, options ---------------------------------------------------
def test_parser_api(wheel, version, as_version):
    """sglang.srt.server_args: a class ServerArgs whose staticmethod add_cli_args(parser) adds the options, and
    prepare_server_args(argv) building its parser the way the wheel's does (same prog)."""
    tree_ = wheel.tree("sglang/srt/server_args.py")
    cls = [n for n in tree_.body if isinstance(n, ast.ClassDef) and n.name == "ServerArgs"][0]
    add = [n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "add_cli_args"][0]
    assert [ast.unparse(d) for d in add.decorator_list] == ["staticmethod"]
    assert [a.arg for a in add.args.args] == ["parser"]
    prepare = ast.parse(wheel.prepare_server_args_source()).body[0]
    made = [n for n in ast.walk(prepare) if isinstance(n, ast.Call) and ast.unparse(n.func) == "argparse.ArgumentParser"]
    prog = {k.arg: ast.literal_eval(k.value) for k in made[0].keywords}.get("prog")
    calls = [ast.unparse(n.func) for n in ast.walk(prepare) if isinstance(n, ast.Call)]
    assert "ServerArgs.add_cli_args" in calls and "parser.parse_args" in calls

    mod = as_version("sglang.srt.server_args")
    assert isinstance(mod.ServerArgs.__dict__["add_cli_args"], staticmethod)
    err = io.StringIO()
    argv0 = sys.argv[0]
    sys.argv[0] = "/venv/lib/sglang/launch_server.py"
    try:
        with contextlib.redirect_stderr(err), pytest.raises(SystemExit):
            mod.prepare_server_args(["--no-such-option-anywhere"])
    finally:
        sys.argv[0] = argv0
    assert err.getvalue().startswith("usage: %s " % (prog or "launch_server.py"))


def test_generated_options_are_the_wheels(wheel, version, as_version):
    assert as_version("sglang._double.cli_options").OPTIONS[version] == tuple(wheel.cli_options())


def repo_flags():
    """Every --flag written in the collection, its docs and its tests (SGLang's or not: a flag SGLang does not
    know must be unknown to the double too)."""
    found = set()
    for top in USED_IN:
        base = ROOT / top
        files = [base] if base.is_file() else [p for p in base.rglob("*") if p.is_file()]
        for path in files:
            if "output" in path.parts or path.name == "cli_options.py" or path.suffix in (".whl", ".gz", ".png"):
                continue  # cli_options.py: the double's generated copy of every real option
            try:
                found.update(FLAG.findall(path.read_text()))
            except UnicodeDecodeError:
                continue
    return sorted(found)


def classify(option_groups, token):
    """What argparse makes of `token` given options [(option strings, nargs)]: ('unknown',), ('ambiguous',),
    or ('option', its first option string, its nargs) for an exact match or a unique prefix."""
    p = argparse.ArgumentParser(prog="x", add_help=False)
    for i, (names, dummy) in enumerate(option_groups):
        p.add_argument(*names, dest="o%d" % i, nargs="?", default=argparse.SUPPRESS)
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            ns = p.parse_args([token])
    except SystemExit:
        msg = err.getvalue()
        if "ambiguous option" in msg:
            return ("ambiguous",)
        if "unrecognized arguments" in msg:
            return ("unknown",)
        raise AssertionError(msg)
    (dest,) = vars(ns)
    names, nargs = option_groups[int(dest[1:])]
    return ("option", names[0], nargs)


def test_flags_used_by_the_collection(wheel, version, as_version):
    """Each flag the repo writes is accepted, rejected or found ambiguous by the double's parser exactly as by a
    parser with the wheel's options."""
    real = [(names, nargs) for names, dummy, nargs in wheel.cli_options()]
    parser = argparse.ArgumentParser()
    as_version("sglang.srt.server_args").ServerArgs.add_cli_args(parser)
    mine = [(tuple(a.option_strings), a.nargs) for a in parser._actions  # pylint: disable=protected-access
            if a.option_strings and not isinstance(a, argparse._HelpAction)]  # pylint: disable=protected-access
    tokens = repo_flags()
    assert "--model-path" in tokens and "--tp" in tokens, "the repo's flags were read"
    got = {t: classify(mine, t) for t in tokens}
    want = {t: classify(real, t) for t in tokens}
    assert {t: g for t, g in got.items() if g != want[t]} == {}, "the double differs (wheel says %s)" % (
        {t: w for t, w in want.items() if got[t] != w})


# --- secret flags ------------------------------------------------------------------------------
def redact_rules():
    """The collection's _host/redact.py (standard library only), loaded from its file."""
    spec = importlib.util.spec_from_file_location("inferops_redact", ROOT / "plugins/module_utils/_host/redact.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_secret_looking_option_is_a_secret_flag_or_said_not_to_be(wheel, version):
    """docs/security.md, secret flags: each option of the wheel whose name says password, secret, token or key is in
    SECRET_FLAGS (its value is kept out of the unit, the plan, the record) or in NOT_SECRET with why not, never both;
    and no other option of the wheel is taken for a secret flag (an option that is a prefix of one: --ssl-keyfile)."""
    r = redact_rules()
    options = [s for names, dummy, nargs in wheel.cli_options() for s in names]
    looking = sorted(o for o in options if r.looks_secret(o))
    assert "--api-key" in looking, "the wheel's options were read"
    assert [o for o in looking if (o in r.SECRET_FLAGS) == (o in r.NOT_SECRET)] == [], (
        "each is a secret flag or said not to be (plugins/module_utils/_host/redact.py)")
    assert [o for o in options if r.secret_flag(o) and o not in r.SECRET_FLAGS] == []
    takes = dict((s, nargs) for names, dummy, nargs in wheel.cli_options() for s in names)
    assert [o for o in looking if o in r.SECRET_FLAGS and takes[o] == 0] == [], "a secret flag takes a value"


def test_the_default_port_is_the_wheels(wheel):
    """_host/redact.py's DEFAULT_PORT, the port a command without --port serves (and the modules' default port), is
    ServerArgs.port's default in the wheel."""
    assert wheel.field_defaults("port") == [redact_rules().DEFAULT_PORT]


def test_the_secret_lists_name_real_options(wheels):
    """NOT_SECRET names options of a supported version (none left over from an older one); the secret flags that no
    version has are the three the commands around SGLang take."""
    r = redact_rules()
    every = set(s for w in wheels.values() for names, dummy, nargs in w.cli_options() for s in names)
    assert sorted(set(r.NOT_SECRET) - every) == []
    assert sorted(set(r.SECRET_FLAGS) - every) == ["--hf-token", "--password", "--token"]


# --- HTTP --------------------------------------------------------------------------------------
@pytest.fixture(scope="session")
def keyed(tmp_path_factory):
    """One double per version, started with --api-key and --tp 1, ready."""
    from tests.conformance.conftest import Running  # pylint: disable=import-outside-toplevel

    started = {}

    def get_one(version):
        if version not in started:
            d = Running(tmp_path_factory.mktemp("keyed-" + version), version, ["--api-key", KEY, "--tp", "1"])
            started[version] = d
            wait_for(lambda: get(d.port, "/v1/models", KEY) == 200 or d.proc.poll() is not None, timeout=60)
            assert d.proc.poll() is None, d.log.read_text()
        return started[version]

    yield get_one
    for d in started.values():
        d.stop()


def probe_paths(wheels):
    """Paths to try: every version's open prefixes, with a suffix, and every info/health/ready route."""
    paths = {"/v1/models", "/generate", "/no-such-path"}
    for w in wheels.values():
        prefixes, dummy = w.api_key_open_prefixes()
        paths |= prefixes | {p + "_x" for p in prefixes}
        paths |= {p for p in w.routes() if INFO_ROUTE.match(p)}
    return sorted(paths)


def test_api_key_open_paths(wheels, wheel, version, keyed):
    prefixes, where = wheel.api_key_open_prefixes()
    d = keyed(version)
    wait_for(lambda: get(d.port, "/health") == 200)
    opened = {p: get(d.port, p) != 401 for p in probe_paths(wheels)}
    assert opened == {p: p.startswith(tuple(prefixes)) for p in opened}, "open without a key per %s" % where


def test_info_health_ready_routes(wheels, wheel, version, keyed):
    routes = {p for p, methods in wheel.routes().items() if "GET" in methods and INFO_ROUTE.match(p)}
    d = keyed(version)
    candidates = sorted({p for w in wheels.values() for p in w.routes() if INFO_ROUTE.match(p)})
    exists = {p: get(d.port, p, KEY) != 404 for p in candidates}
    assert exists == {p: p in routes for p in candidates}


# --- process titles ----------------------------------------------------------------------------
COMBOS = ({"tp": 1, "dp": 1, "pp": 1}, {"tp": 2, "dp": 2, "pp": 1}, {"tp": 2, "dp": 1, "pp": 2})


def expected_titles(wheel, combo):
    """The scheduler titles the wheel's rule gives for a tp/dp/pp layout (ep, attn_cp, moe_dp: 1)."""
    base, chain, (old, new) = wheel.scheduler_title_rule()
    sizes = {"tp": combo["tp"], "pp": combo["pp"], "ep": 1, "attn_cp": 1, "moe_dp": 1}
    out = set()
    for dp in range(combo["dp"]):
        for pp in range(combo["pp"]):
            for tp in range(combo["tp"]):
                ranks = {"dp": dp, "tp": tp, "pp": pp, "ep": 0, "attn_cp": 0, "moe_dp": 0}
                prefix = ""
                for axis, label in chain:
                    # a dp rank exists only for schedulers started by the data-parallel controller (dp > 1)
                    shown = combo["dp"] > 1 if axis == "dp" else sizes[axis] > 1
                    if shown:
                        prefix += " %s%d" % (label, ranks[axis])
                out.add(base + prefix.replace(old, new))
    return out


@pytest.mark.parametrize("combo", COMBOS, ids=lambda c: "tp%(tp)d-dp%(dp)d-pp%(pp)d" % c)
def test_process_titles(wheel, version, combo, run_double):
    controller, detokenizer = wheel.constant_title(DP_CONTROLLER), wheel.constant_title(DETOKENIZER)
    d = run_double(version, "--tp-size", str(combo["tp"]), "--dp-size", str(combo["dp"]),
                   "--pp-size", str(combo["pp"]))
    want = expected_titles(wheel, combo)
    every = want | {detokenizer} | ({controller} if combo["dp"] > 1 else set())

    def titled():
        found = {c: (pid, ppid) for pid, (ppid, c) in tree(d.proc.pid).items() if c.startswith("sglang::")}
        return found if every <= set(found) or d.proc.poll() is not None else None

    titled = wait_for(titled, timeout=60)
    assert d.proc.poll() is None, d.log.read_text()
    schedulers = {c for c in titled if c not in (controller, detokenizer)}
    assert schedulers == want
    assert titled[detokenizer][1] == d.proc.pid
    if combo["dp"] > 1:
        assert titled[controller][1] == d.proc.pid
        assert {titled[c][1] for c in schedulers} == {titled[controller][0]}, "the controller is their parent"
    else:
        assert controller not in titled
        assert {titled[c][1] for c in schedulers} == {d.proc.pid}
    assert all(stat(pid)[2] == stat(d.proc.pid)[2] for pid, dummy in titled.values()), "one process group"


# where each version caps the profiled KV capacity by --max-total-tokens (min) and where it raises when no token is
# left (the double's Server.kv_pool)
KV_POOL = {
    "0.5.5": ("sglang/srt/model_executor/model_runner.py", "sglang/srt/model_executor/model_runner.py"),
    "0.5.9": ("sglang/srt/model_executor/model_runner_kv_cache_mixin.py",) * 2,
    "0.5.15": ("sglang/srt/model_executor/model_runner_kv_cache_mixin.py",
               "sglang/srt/model_executor/pool_configurator.py"),
    "0.5.17": ("sglang/srt/mem_cache/kv_cache_configurator.py", "sglang/srt/model_executor/pool_configurator.py"),
    "0.5.23": ("sglang/srt/mem_cache/kv_cache_configurator.py", "sglang/srt/model_executor/pool_configurator.py"),
}


def test_a_kv_pool_of_no_tokens_is_the_scheduler_s_runtime_error_as_in_the_wheels(wheel, version):
    cap, raises = KV_POOL[version]
    assert re.search(r"min\(\s*(self\.max_total_num_tokens|token_capacity),\s*(max_total_tokens|user_limit)\)",
                     wheel.text(cap))
    message = re.search(r'NOT_ENOUGH_MEMORY = "([^"]+)"', (DOUBLE / "sglang" / "_double" / "server.py").read_text())
    assert message and message.group(1) in wheel.text(raises)
    assert "if self.max_total_num_tokens <= 0:" in wheel.text(raises)
