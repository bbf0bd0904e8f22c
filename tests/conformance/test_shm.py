"""The POSIX shared memory each real wheel creates in /dev/shm, read from its source (AST and text, never imported),
against what the double creates as that version (sglang/_double/shm.py) and what the collection's sweep removes for it
(plugins/module_utils/_host/shm.py). A name a wheel creates that the double does not (and does not declare as not
emulated), or that the sweep does not match, or a name the sweep matches that the version never creates, fails."""
import ast
import hashlib
import json
import os
import re
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest

from tests.conformance.conftest import double_env
from tests.conformance.versions import ROOT, VERSIONS
from tests.helpers import free_port

STALE = "sglang/srt/utils/stale_shm_cleanup.py"
MIXIN = "sglang/srt/managers/multi_tokenizer_mixin.py"
LOADS = "sglang/srt/managers/load_snapshot.py"
SERVER_ARGS = "sglang/srt/server_args.py"


def _by_path(name, path, text=None):
    """A module loaded from its file, without putting its package on sys.path (the double's `sglang` must not shadow
    anything in this process; the sweep is standard library only)."""
    import types  # pylint: disable=import-outside-toplevel
    mod = types.ModuleType(name)
    mod.__file__ = str(path)
    code = compile(text if text is not None else path.read_text(), str(path), "exec")
    exec(code, mod.__dict__)  # pylint: disable=exec-used
    return mod


sweep = _by_path("inferops_shm_sweep", ROOT / "plugins" / "module_utils" / "_host" / "shm.py")
_DOUBLE_SHM = ROOT / "tests" / "sglang_double" / "sglang" / "_double" / "shm.py"
# the double's module, its one relative need (config.at_least) given from the double's config.py
_config = _by_path("sglang_double_config", _DOUBLE_SHM.parent / "config.py")
double_shm = _by_path("sglang_double_shm", _DOUBLE_SHM, _DOUBLE_SHM.read_text().replace(
    "from sglang._double.config import at_least\n", ""))
double_shm.at_least = _config.at_least


def _call_name(call):
    f = call.func
    return f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else None


def families(wheel):
    """{family: (template regex of the name, the file:line that creates it)} of the server's (sglang/srt) segments:
    `multi_tokenizer_args`, `sgl_shm_<kind>` per make_shm_name kind, `sglang_loads`, `psm` (nameless
    SharedMemory(create=True): Python's own psm_<hex>)."""
    out = {}
    srt = sorted(n for n in wheel.names if n.startswith("sglang/srt/") and n.endswith(".py"))
    # make_shm_name's f-string: sgl_shm_{kind}_{os.getpid()}_{uuid.uuid4().hex[:8]}
    template = None
    if STALE in wheel.names:
        fn = wheel._function(STALE, "make_shm_name")
        ret = [n for n in ast.walk(fn) if isinstance(n, ast.Return)][0].value
        text = ast.unparse(ret)
        prefix = [n for n in wheel.tree(STALE).body if isinstance(n, ast.Assign)
                  and getattr(n.targets[0], "id", "") == "_SGL_SHM_PREFIX"][0].value.value
        m = re.fullmatch(r"f'\{_SGL_SHM_PREFIX\}_\{kind\}_\{os\.getpid\(\)\}_\{uuid\.uuid4\(\)\.hex\[:(\d+)\]\}'", text)
        assert m, "%s: make_shm_name returns %s, which this reader does not know" % (STALE, text)
        template = (prefix, int(m.group(1)))
    for name in srt:
        text = wheel.text(name)
        if "SharedMemory(" not in text and "make_shm_name(" not in text and "write_to_shared_memory(" not in text:
            continue
        for n in ast.walk(wheel.tree(name)):
            if not isinstance(n, ast.Call):
                continue
            where = "%s:%d" % (name, n.lineno)
            if _call_name(n) == "make_shm_name" and n.args and isinstance(n.args[0], ast.Constant):
                assert template, "%s calls make_shm_name without %s" % (where, STALE)
                kind = n.args[0].value
                out["sgl_shm_" + kind] = (r"%s_%s_(?P<pid>[0-9]+)_[0-9a-f]{%d}" % (template[0], kind, template[1]),
                                          where)
            elif _call_name(n) == "SharedMemory":
                kw = {k.arg: k.value for k in n.keywords}
                if "create" in kw and ast.unparse(kw["create"]) == "True" and "name" not in kw \
                        and "multimodal" not in name and "hf3fs" not in name:
                    out.setdefault("psm", (r"psm_[0-9a-f]+", where))
            elif _call_name(n) == "write_to_shared_memory" and len(n.args) == 2 \
                    and isinstance(n.args[1], ast.JoinedStr):
                head = n.args[1].values[0]
                if isinstance(head, ast.Constant) and head.value == "multi_tokenizer_args_":
                    out["multi_tokenizer_args"] = (r"multi_tokenizer_args_(?P<pid>[0-9]+)", where)
    if LOADS in wheel.names:
        fn = wheel._function(LOADS, "shm_path_for")
        ret = ast.unparse([n for n in ast.walk(fn) if isinstance(n, ast.Return)][0].value)
        assert ret == "f'/dev/shm/sglang_loads_{safe_name}_{digest}.shm'", "%s: shm_path_for returns %s" % (LOADS, ret)
        size = [k.value.value for n in ast.walk(fn) if isinstance(n, ast.Call) and _call_name(n) == "blake2s"
                for k in n.keywords if k.arg == "digest_size"][0]
        idlen = re.search(r"instance_id = uuid\.uuid4\(\)\.hex\[:(\d+)\]", wheel.text(SERVER_ARGS))
        assert idlen, "%s: no `instance_id = uuid.uuid4().hex[:N]`" % SERVER_ARGS
        out["sglang_loads"] = (r"sglang_loads_(?P<id>[0-9a-f]{%s})_[0-9a-f]{%d}\.shm" % (idlen.group(1), 2 * size),
                               "%s:%d" % (LOADS, fn.lineno))
    # the names with the files that create them must be found in every supported version
    assert "multi_tokenizer_args" in out, "%s: no write_to_shared_memory(..., f\"multi_tokenizer_args_...\")" % MIXIN
    return out


def sample(regex):
    """A name that the template regex matches."""
    name = re.sub(r"\(\?P<pid>\[0-9\]\+\)", "4242", regex)
    name = re.sub(r"\(\?P<id>\[0-9a-f\]\{(\d+)\}\)", lambda m: "a" * int(m.group(1)), name)
    name = re.sub(r"\[0-9a-f\]\{(\d+)\}", lambda m: "b" * int(m.group(1)), name)
    name = name.replace(r"[0-9a-f]+", "c0ffee").replace("\\.", ".")
    assert re.fullmatch(regex, name), (regex, name)
    return name


def double_names(version, tmp_path):
    """The names the double creates as version (--tp 2 and --tokenizer-worker-num 2: every kind it makes), once
    ready; then every one of them unlinked."""
    state = tmp_path / ("state-%s.jsonl" % version)
    records = tmp_path / ("state-%s.jsonl.shm" % version)
    port = free_port()
    model = tmp_path / "model"
    model.mkdir(exist_ok=True)
    argv = [sys.executable, "-m", "sglang.launch_server", "--model-path", str(model), "--host", "127.0.0.1",
            "--port", str(port), "--tp", "2", "--tokenizer-worker-num", "2"]
    proc = subprocess.Popen(argv, env=double_env(version, SGLANG_DOUBLE_STATE_FILE=str(state)),
                            stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen("http://127.0.0.1:%d/health" % port, timeout=5) as r:
                    if r.status == 200:
                        break
            except (urllib.error.URLError, OSError):
                pass
            assert time.monotonic() < deadline and proc.poll() is None, "the double did not become ready"
            time.sleep(0.05)
        recs = [json.loads(line) for line in records.read_text().splitlines()]
        return [(r["name"], r["pid"]) for r in recs if r["event"] == "shm_created"], proc.pid
    finally:
        proc.kill()
        proc.wait()
        for line in records.read_text().splitlines() if records.exists() else []:
            r = json.loads(line)
            if r["event"] == "shm_created":
                try:
                    os.unlink(os.path.join(double_shm.SHM_DIR, r["name"]))
                except FileNotFoundError:
                    pass


def family_of(name, fams):
    hits = [f for f, (regex, dummy) in fams.items() if re.fullmatch(regex, name)]
    return hits[0] if len(hits) == 1 else None


@pytest.fixture(scope="module")
def every_family(wheels):
    return {v: families(wheels[v]) for v in VERSIONS}


def test_double_creates_the_wheels_names(wheel, version, every_family, tmp_path):
    fams = every_family[version]
    created, main = double_names(version, tmp_path)
    found = {}
    for name, pid in created:
        fam = family_of(name, fams)
        assert fam is not None, "the double as %s creates %s, a name the wheel never creates (%s)" % (
            version, name, sorted(fams))
        m = re.fullmatch(fams[fam][0], name)
        if "pid" in m.groupdict():
            assert int(m.group("pid")) == pid, "%s: the pid in the name is not its creator's (%d)" % (name, pid)
        if fam == "multi_tokenizer_args":
            assert pid == main, "multi_tokenizer_args is the main process's (http_server.py)"
        if fam == "sglang_loads":
            digest = name[len("sglang_loads_"):-len(".shm")].split("_")[1]
            assert digest == hashlib.blake2s(m.group("id").encode(), digest_size=len(digest) // 2).hexdigest()
        found.setdefault(fam, []).append(name)
    wanted = {f for f in fams if not (f.startswith("sgl_shm_") and f[len("sgl_shm_"):] in double_shm.NOT_EMULATED)}
    assert set(found) == wanted, "the double as %s creates %s; the wheel %s" % (
        version, sorted(found), {f: fams[f][1] for f in fams})
    stale = {k for k in double_shm.NOT_EMULATED if not any("sgl_shm_" + k in every_family[v] for v in VERSIONS)}
    assert not stale, "NOT_EMULATED names kinds no wheel creates: %s" % sorted(stale)


def test_sweep_matches_what_the_wheel_creates_and_nothing_else(version, every_family):
    fams = every_family[version]
    pats = sweep.patterns(version)
    for fam, (regex, where) in fams.items():
        name = sample(regex)
        ok, pid = sweep.match(name, pats)
        if fam == "psm":  # Python's own, any program's: never the sweep's
            assert not ok, "the sweep for %s matches %s (%s)" % (version, name, where)
            continue
        assert ok, "the sweep for %s misses %s, which %s creates" % (version, name, where)
        assert pid == (4242 if "(?P<pid>" in regex else None), (name, pid)
    # a name of another version's wheel that this version never creates is not swept; a make_shm_name kind of
    # another version is, where this version has make_shm_name: `sgl_shm_` is SGLang's own prefix for every kind
    # (its own stale_shm_cleanup.py takes every sgl_shm_ name as its own), and the sweep matches any kind
    has_make = any(f.startswith("sgl_shm_") for f in fams)
    others = {f: r for v in VERSIONS for f, (r, dummy) in every_family[v].items()
              if f not in fams and not (has_make and f.startswith("sgl_shm_"))}
    for fam, regex in others.items():
        assert not sweep.match(sample(regex), pats)[0], "the sweep for %s matches %s, which its wheel never creates" % (
            version, sample(regex))
