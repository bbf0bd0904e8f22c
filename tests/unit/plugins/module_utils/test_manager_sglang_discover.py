"""sglang_discover's look at the captured model: measured always, warmed with prewarm=auto only when a switch is
ahead and not in check mode; on real files evicted from the page cache. Its look at a real server: nothing written,
the units that could serve its port named."""
import json
import os
import signal

import pytest

from ansible_collections.inferops.sglang.plugins.module_utils._host import (
    caches as _caches, pagecache as _pagecache, procfs as _procfs)
from ansible_collections.inferops.sglang.plugins.module_utils._server import listeners as _listeners, port_units as _port_units
from ansible_collections.inferops.sglang.plugins.module_utils._manager_sglang_discover import SglangDiscover, installed, served, upgrade
from tests.unit.conftest import free_port, wait_for
from .conftest import (MIB, NOBODY, Exited, Failed, FakeModule, Systemd, double_venv, evict, server_cmd, wait_listening,
                       write)


class Module(FakeModule):
    """What the manager uses of AnsibleModule."""

    defaults = dict(port=30000, unit="sglang-30000", capture_path=None, redact=[], prewarm="auto", prewarm_budget=60,
                    prewarm_margin_gib=0)


@pytest.fixture
def cap(tmp_path, kept):
    """A capture whose --model-path is relative to its cwd; its weights out of the page cache (what a warm reads of
    them stays: kept)."""
    model = tmp_path / "llama"
    model.mkdir()
    for name in ("model-1.safetensors", "model-2.safetensors"):
        evict(write(model / name, 8 * MIB))
    (model / "config.json").write_text("{}")
    return {"argv": ["python", "-m", "sglang.launch_server", "--model-path", "llama"], "environment": {},
            "cwd": str(tmp_path), "user": "root", "uid": 0}


def test_auto_warms_what_the_switch_will_load(cap):
    m = SglangDiscover(Module()).model_files(cap, warm=True)
    assert m["files"] == 2 and m["bytes"] == 16 * MIB and m["resident"] < 16 * MIB and m["available"] > 0
    assert m["warm"]["read"] >= 16 * MIB - m["resident"] and m["warm"]["resident_after"] == 16 * MIB
    assert m["warm"]["resident_before"] == m["resident"] and m["warm"]["errors"] == []
    assert m["summary"].startswith("model: 17 MB in 2 files, ") and "100 % resident after" in m["summary"]


@pytest.mark.parametrize("check_mode, warm, skipped", [(True, True, "check mode"),
                                                       (False, False, "the unit serves the port already")])
def test_check_mode_and_a_unit_serving_already_only_measure(cap, check_mode, warm, skipped):
    m = SglangDiscover(Module(check_mode=check_mode)).model_files(cap, warm=warm)
    assert m["warm"] is None and m["warm_skipped"] == skipped and m["summary"].endswith("; not warmed: " + skipped)
    assert SglangDiscover(Module()).model_files(cap, warm=False)["resident"] < 16 * MIB  # nothing was read


def test_plan_says_a_warm_is_due_and_reads_nothing(cap):
    m = SglangDiscover(Module(prewarm="plan")).model_files(cap, warm=True)
    assert m["warm"] is None and m["warm_due"] is True and m["resident"] < 16 * MIB
    assert sorted(os.path.basename(p) for p in m["paths"]) == ["model-1.safetensors", "model-2.safetensors"]
    assert SglangDiscover(Module()).model_files(cap, warm=False)["resident"] == m["resident"]  # nothing was read
    assert SglangDiscover(Module(prewarm="plan")).model_files(cap, warm=False)["warm_due"] is False


def test_off_only_measures_and_no_capture_is_none(cap):
    m = SglangDiscover(Module(prewarm="off")).model_files(cap, warm=True)
    assert m["warm"] is None and "warm_skipped" not in m and m["resident"] < 16 * MIB
    assert SglangDiscover(Module()).model_files({}, warm=True) is None


def test_a_capture_without_a_uid_is_neither_measured_nor_warmed_as_root(cap):
    """Never root by default: a capture that names no uid says so, and reads nothing."""
    del cap["uid"]
    m = SglangDiscover(Module()).model_files(cap, warm=True)
    assert (m["files"], m["paths"], m.get("warm"), m.get("warm_due")) == (0, [], None, None)
    assert m["msg"] == "not measured: the capture names no uid to read as"
    assert SglangDiscover(Module(prewarm="off")).model_files(dict(cap, uid=0), warm=False)["resident"] < 16 * MIB


def test_a_negative_budget_or_margin_is_refused():
    for bad in (dict(prewarm_budget=-1), dict(prewarm_margin_gib=-1)):
        with pytest.raises(Failed, match="prewarm_budget and prewarm_margin_gib must be >= 0"):
            SglangDiscover(Module(**bad)).run()


def test_the_served_model_is_asked_with_the_key_only_of_the_servers_family(impostor, server, spawn):
    """The server found (its pid) is asked for its model and its version with its own --api-key; whoever else
    accepts the connection (another user on the port) is asked nothing."""
    p = server("--api-key", "sk-served", version="0.5.15")
    port = int(p.url.rsplit(":", 1)[1])
    assert wait_for(lambda: served(port, ["--api-key", "sk-served"], p.pid)[0], 30) == spawn.marker
    assert served(port, ["--api-key", "sk-served"], p.pid) == (spawn.marker, "0.5.15")
    other = free_port()
    impostor.start(other)
    assert served(other, ["--api-key", "sk-served"], p.pid) == (None, None)
    assert impostor.requests() == []


@pytest.mark.skipif(os.getuid() != 0, reason="needs root: it asks as nobody")
def test_the_installed_version_is_asked_of_the_servers_interpreter_as_its_user_never_root_of_anothers_venv(
        tmp_path, nobody_venv):
    """What a restart of the serving server would run: its command's interpreter, asked as the server's user; a
    server of root's whose venv another user can change is not asked (that user's .pth would run as root)."""
    mine = double_venv(tmp_path)
    argv = [mine.python, "-m", "sglang.launch_server", "--model-path", "m"]
    assert installed(argv, 0) == ("0.5.23", None)
    theirs = [nobody_venv.python, "-m", "sglang.launch_server", "--model-path", "m"]
    version, why = installed(theirs, 0)
    assert version is None and why.startswith("%s was not asked: it would run as root, and " % nobody_venv.python)
    assert installed(theirs, NOBODY.pw_uid) == ("0.5.23", None)
    assert set(nobody_venv.ran_as()) == {NOBODY.pw_uid}, "never as root"
    assert installed(["/usr/bin/sleep", "600"], 0) == (None, "the server's command names no Python interpreter to ask")


def test_with_nothing_on_the_port_the_units_cache_environment_is_the_one_its_server_would_give(shell, tmp_path):
    """A rerun between a switch's stop and its start (or with the server down) finds nothing on the port: the unit
    it renders from the kept capture has the same cache environment as with the server up, or the switch would
    restart the service for nothing, and again on the next run."""
    port = free_port()
    shell("%s > s.log 2>&1 & wait" % server_cmd(port))
    (pid,) = wait_listening(port)
    capture = tmp_path / "capture.json"
    with pytest.raises(Exited) as e:
        SglangDiscover(Module(port=port, capture_path=str(capture), prewarm="off")).run()
    up = e.value.args[0]
    assert up["running_version"].startswith("0.5.23") and up["caches"]["environment"]["SGLANG_CACHE_DIR"], up
    # what the switch keeps; its interpreter a venv where SGLang 0.5.23 is installed (the double runs from this
    # interpreter, SGLang on its PYTHONPATH only: asked with a clean environment, it has none)
    python = double_venv(tmp_path).python
    capture.write_text(json.dumps(dict(up["stored"], argv=[python] + up["stored"]["argv"][1:])))
    os.killpg(os.getpgid(pid), signal.SIGKILL)
    wait_for(lambda: not _listeners.listeners(port, _procfs.snapshot()), 15)
    with pytest.raises(Exited) as e:
        SglangDiscover(Module(port=port, capture_path=str(capture), prewarm="off")).run()
    down = e.value.args[0]
    assert not down["found"]
    assert (down["caches"] or {}).get("environment") == up["caches"]["environment"]
    with pytest.raises(Exited) as e:  # without a capture, nothing to make a unit of
        SglangDiscover(Module(port=port, prewarm="off")).run()
    assert e.value.args[0]["caches"] is None
    # ... unless it is made from variables alone: the command's own server's, as with a capture of that command (its
    # secrets masked, its environment's HOME and cache variables only; the others are not read)
    env = dict((k, v) for k, v in up["stored"]["environment"].items() if k in _caches.CACHE_VARIABLES)
    command = [python] + up["stored"]["argv"][1:] + ["--api-key", "********"]
    with pytest.raises(Exited) as e:
        SglangDiscover(Module(port=port, prewarm="off", command=command, user="root",
                              environment=dict(env, HF_TOKEN="not read"))).run()
    assert e.value.args[0]["caches"]["environment"] == up["caches"]["environment"]
    with pytest.raises(Exited) as e:  # a user this host does not know: no unit of theirs to make
        SglangDiscover(Module(port=port, prewarm="off", command=command, user="no-such-user-here")).run()
    assert e.value.args[0]["caches"] is None


def test_an_upgrade_is_a_public_version_that_differs():
    assert upgrade("0.5.15", "0.5.23+double") == dict(installed="0.5.23", running="0.5.15",
                                                      summary="installed 0.5.23, running 0.5.15")
    assert upgrade("0.5.23", "0.5.23+cu130") is None
    assert upgrade(None, "0.5.23") is None and upgrade("0.5.15", None) is None


def test_a_rank_of_a_multi_node_server_is_reported_as_such(two_nodes):
    """From either host: the server's place in the group, from its argv; rank 1 is not asked for a model (its port
    serves no API)."""
    rank0, rank1 = two_nodes
    with pytest.raises(Exited) as e:
        SglangDiscover(Module(port=rank1.port, prewarm="off")).run()
    one = e.value.args[0]
    assert one["sglang"] and "model" not in one
    assert {k: one["multinode"][k] for k in ("nnodes", "node_rank", "role")} == {
        "nnodes": 2, "node_rank": 1, "role": "rank >= 1"}
    assert one["multinode"]["dist_init_addr"].startswith("127.0.0.1:")
    assert "rank 1 of a 2-node SGLang server" in one["multinode"]["refusal"]
    # it says no version of its own: the installed one is asked, served by a unit or not (where its caches are, and
    # so its unit's environment, depend on it: the same on the first run and on a rerun)
    assert "installed_version" in one and "running_version" not in one
    with pytest.raises(Exited) as e:
        SglangDiscover(Module(port=rank0.port, prewarm="off")).run()
    assert e.value.args[0]["multinode"]["role"] == "rank 0"
    assert "installed_version" not in e.value.args[0], "rank 0 says its version; a hand-launched one is not asked"


@pytest.mark.skipif(os.getuid() != 0, reason="needs root: the capture is nobody's")
def test_a_server_users_capture_never_names_or_reads_what_that_user_cannot(cap, tmp_path):
    """nobody's server names a root-only folder as its model: none of its files is named, measured or read."""
    model = tmp_path / "llama"
    model.chmod(0o700)
    m = SglangDiscover(Module()).model_files(dict(cap, cwd="/", argv=cap["argv"][:-1] + [str(model)],
                                                  uid=NOBODY.pw_uid, gid=NOBODY.pw_gid, user="nobody"), warm=True)
    assert m["files"] == 0 and m["paths"] == [] and m["warm"] is None and "model-1" not in json.dumps(m)
    assert _pagecache.residency([str(model / "model-1.safetensors")])["resident"] < 8 * MIB  # nothing was read


def test_discovery_writes_nothing_and_names_the_units_that_could_serve_the_port(shell, tmp_path, monkeypatch):
    """A server run by hand, the operator's unit for its port enabled: the full capture comes back in `stored`
    (none is written), and the unit is listed."""
    port = free_port()
    shell("%s --api-key sk-discover > s.log 2>&1 & wait" % server_cmd(port))
    (pid,) = wait_listening(port)
    etc = tmp_path / "etc"
    etc.mkdir()
    (etc / "kimi.service").write_text("[Service]\nExecStart=/v/python -m sglang.launch_server --api-key sk-discover "
                                      "--port %d\n" % port)
    monkeypatch.setattr(_port_units, "UNIT_DIRS", (str(etc),))
    systemd = Systemd(**{"kimi.service": dict(UnitFileState="enabled")})

    class Host(Module):
        def run_command(self, argv):
            return systemd(argv)

    capture = tmp_path / "state" / str(port) / "capture.json"
    with pytest.raises(Exited) as e:
        SglangDiscover(Host(port=port, capture_path=str(capture), prewarm="off")).run()
    out = e.value.args[0]
    assert out["changed"] is False and not (tmp_path / "state").exists()
    assert out["stored"]["pid"] == pid and out["stored"]["argv"][-2:] == ["--api-key", "sk-discover"]
    (kimi,) = out["units"]
    assert kimi["unit"] == "kimi.service" and kimi["fights"] and not kimi["holds_port"] and not kimi["managed"]
    assert "sk-discover" not in kimi["exec_start"] and "sk-discover" not in str(
        dict((k, v) for k, v in out.items() if k != "stored"))
    with pytest.raises(Exited) as e:  # without capture_path, nothing secret comes back
        SglangDiscover(Host(port=port, prewarm="off")).run()
    assert e.value.args[0]["stored"] == {}


def test_an_ipv6_only_server_is_found_and_asked_on_its_loopback(shell):
    """`--host ::` is IPv6 only (as a real 0.5.15's uvicorn binds it): discovery says where it answers ([::1]) and
    asks its model there, with its own key."""
    port = free_port()
    shell("%s --host :: --api-key sk-six --served-model-name six > s.log 2>&1 & wait" % server_cmd(port))
    (pid,) = wait_listening(port)
    wait_for(lambda: served(port, ["--api-key", "sk-six"], pid)[0], 15)
    systemd = Systemd()

    class Host(Module):
        def run_command(self, argv):
            return systemd(argv)

    with pytest.raises(Exited) as e:
        SglangDiscover(Host(port=port, prewarm="off")).run()
    out = e.value.args[0]
    assert out["url"] == "http://[::1]:%d" % port and out["model"] == "six" and out["server"]["pid"] == pid
    assert "sk-six" not in json.dumps(out)
