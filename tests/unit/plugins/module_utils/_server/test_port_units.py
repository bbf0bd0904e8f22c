"""The units that could serve a port: real unit files in folders laid out as systemd's (its own folders swapped for
temporary ones), parsed as systemd reads them; systemctl answered by a small stand-in (systemd is not PID 1 here:
molecule/units runs the takeover against a real one); the server a real process of the double."""
import json
import os

import pytest

from ansible_collections.inferops.sglang.plugins.module_utils import _state_dir
from ansible_collections.inferops.sglang.plugins.module_utils._server import port_units as _port_units
from tests.unit.conftest import free_port
from ..conftest import Systemd, server_cmd, wait_listening

KIMI = """[Unit]
Description=Kimi on SGLang (written by hand)

[Service]
Type=simple
Environment=PORT=%(port)s SGLANG_DOUBLE_LOAD_SECONDS=1
ExecStart=/opt/venv/bin/python -m sglang.launch_server --model-path /models/kimi \\
    --api-key sk-unit-secret --port ${PORT}
Restart=always

[Install]
WantedBy=multi-user.target
"""


@pytest.fixture
def dirs(tmp_path):
    """systemd's folders, in its order: /etc, /run, /lib (as temporary folders)."""
    out = [tmp_path / name for name in ("etc", "run", "lib")]
    for d in out:
        d.mkdir()
    return [str(d) for d in out]


def put(folder, name, text):
    path = os.path.join(folder, name)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)
    return path


def test_unit_files_as_systemd_finds_them_precedence_masks_aliases_links_and_drop_ins(dirs, tmp_path):
    etc, run, lib = dirs
    put(lib, "a.service", "[Service]\nExecStart=/bin/true\n")
    put(etc, "a.service", "[Service]\nExecStart=/bin/false\n")  # /etc hides /lib
    put(lib, "masked.service", "")
    os.symlink("/dev/null", os.path.join(etc, "masked.service"))
    os.symlink(os.path.join(lib, "a.service"), os.path.join(etc, "alias.service"))  # an alias of a
    outside = put(str(tmp_path / "opt"), "linked.service", "[Service]\n")
    os.symlink(outside, os.path.join(etc, "linked.service"))  # systemctl link
    put(lib, "tmpl@.service", "[Service]\n")
    put(lib, "a.service.d/10-x.conf", "lib's 10")
    put(run, "a.service.d/10-x.conf", "run's 10")  # hides /lib's of the same name
    put(lib, "a.service.d/20-y.conf", "")
    put(etc, "a.service.d/ignored.txt", "")
    found = _port_units.unit_files(dirs)
    assert sorted(found) == ["a.service", "linked.service"]
    assert found["a.service"] == (os.path.join(etc, "a.service"),
                                  [os.path.join(run, "a.service.d/10-x.conf"), os.path.join(lib, "a.service.d/20-y.conf")])
    assert found["linked.service"] == (os.path.join(etc, "linked.service"), [])


def test_exec_start_as_the_file_and_its_drop_ins_leave_it():
    base = "[Service]\nEnvironment=P=30001\nExecStart=-/venv/bin/python -m sglang.launch_server \\\n  # a comment\n  --port $P\n"
    assert _port_units.exec_starts([base]) == [["/venv/bin/python", "-m", "sglang.launch_server", "--port", "30001"]]
    reset = "[Service]\nExecStart=\nExecStart=@/venv/bin/sglang sglang serve --port=${P} --port 30000\n"
    (argv,) = _port_units.exec_starts([base, reset])
    assert argv == ["/venv/bin/sglang", "sglang", "serve", "--port=30001", "--port", "30000"]
    assert _port_units.serves(argv, 30000) and not _port_units.serves(argv, 30001)  # argparse: the last one
    assert _port_units.serves(["/v/python", "-m", "sglang.launch_server", "--model-path", "m"], 30000)  # the default
    assert not _port_units.serves(["/v/python", "-m", "http.server", "--port", "30000"], 30000)
    assert _port_units.port_of(["sglang", "serve", "--port", "$UNSET"]) is None
    assert _port_units.exec_starts(["[Unit]\nExecStart=/not/in/service\n"]) == []


def test_every_unit_that_could_serve_the_port_enabled_running_or_merely_installed(dirs, shell, monkeypatch):
    etc, run, lib = dirs
    port = free_port()
    put(etc, "kimi.service", KIMI % {"port": port})
    put(lib, "lib-only.service", "[Service]\nExecStart=/v/python -m sglang.launch_server --port %d\n" % (port + 1))
    # its drop-in makes it serve the port
    put(etc, "lib-only.service.d/port.conf",
        "[Service]\nExecStart=\nExecStart=/v/python -m sglang.launch_server --port %d\n" % port)
    put(run, "other-port.service", "[Service]\nExecStart=/v/sglang serve --port %d\n" % (port + 2))
    put(etc, "sglang-%d.service" % port, "# inferops.sglang.systemd_unit.\n[Service]\nExecStart=/v/sglang serve "
                                         "--port %d\n" % port)
    put(etc, "wrapper.service", "[Service]\nExecStart=/usr/local/bin/start-the-model\n")  # counted by its main process
    shell("%s > s.log 2>&1 & wait" % server_cmd(port))
    (pid,) = wait_listening(port)
    systemd = Systemd(**{"kimi.service": dict(UnitFileState="enabled"),
                         "lib-only.service": dict(UnitFileState="disabled"),
                         "wrapper.service": dict(UnitFileState="enabled", ActiveState="active", MainPID=str(pid),
                                                 FragmentPath=os.path.join(etc, "wrapper.service"))})
    real = _port_units._procfs.unit_of
    # the server in wrapper.service's cgroup, where systemd would have put it (no systemd runs the tests)
    monkeypatch.setattr(_port_units._procfs, "unit_of", lambda p: "wrapper.service" if p == pid else real(p))
    units = _port_units.find(port, systemd, "sglang-%d.service" % port, pid, redact=lambda t: t.replace(
        "sk-unit-secret", "********"), dirs=dirs)
    by = dict((u["unit"], u) for u in units)
    assert sorted(by) == ["kimi.service", "lib-only.service", "sglang-%d.service" % port, "wrapper.service"]
    kimi = by["kimi.service"]
    assert kimi["fights"] and not kimi["holds_port"] and kimi["files"] == [os.path.join(etc, "kimi.service")]
    assert "sk-unit-secret" not in kimi["exec_start"] and "--port %d" % port in kimi["exec_start"]
    assert kimi["summary"] == "kimi.service (%s, enabled, inactive)" % os.path.join(etc, "kimi.service")
    lib_only = by["lib-only.service"]
    assert not lib_only["fights"] and lib_only["dropins"] == [os.path.join(etc, "lib-only.service.d/port.conf")]
    wrapper = by["wrapper.service"]
    assert wrapper["holds_port"] and wrapper["fights"] and wrapper["exec_start"] is None and wrapper["main_pid"] == pid
    managed = by["sglang-%d.service" % port]
    assert managed["managed"] and managed["ours"]


def unit(name, path, **kw):
    u = dict(unit=name, path=path, dropins=[], files=[path], unit_file_state="disabled", active_state="inactive",
             main_pid=0, holds_port=False, managed=False, ours=False, exec_start="", summary=name + " (...)")
    u.update(kw)
    u["fights"] = u["unit_file_state"] in _port_units.ENABLED or u["active_state"] in _port_units.RUNNING
    return u


def test_what_the_takeover_does_to_each(tmp_path):
    units = [unit("a.service", "/a", unit_file_state="enabled"),
             unit("b.service", "/b", unit_file_state="enabled", active_state="active", holds_port=True),
             unit("c.service", "/c", active_state="active"),
             unit("d.service", "/d"),
             unit("mine.service", "/m", managed=True),
             unit("ours.service", "/o", managed=True, ours=True)]
    plans = [u["plan"] for u in _port_units.decide(units, "replace")]
    assert plans == ["a.service (...): replace: backed up, disabled",
                     "b.service (...): replace: backed up, disabled, stopped by the switch",
                     "c.service (...): replace: backed up, stopped",
                     "d.service (...): leave: left as it is (neither enabled nor running)",
                     "mine.service (...): rewrite: backed up, then rewritten as the managed unit"]
    refused = [u["action"] for u in _port_units.decide(units, "refuse")]
    assert refused == ["refuse", "refuse", "refuse", "leave", "rewrite"]


def test_the_takeover_backs_up_disables_stops_and_a_rollback_puts_exactly_those_back(dirs, tmp_path):
    etc, run, lib = dirs
    state = str(tmp_path / "state" / "30000")
    kimi = put(etc, "kimi.service", KIMI % {"port": 30000})
    drop = put(etc, "kimi.service.d/env.conf", "[Service]\nEnvironment=A=1\n")
    looping = put(lib, "looping.service", "[Service]\nExecStart=/v/sglang serve\n")
    mine = put(etc, "mine.service", "[Service]\nType=simple\nRestart=always\n")
    os.chmod(kimi, 0o640)
    systemd = Systemd(**{"kimi.service": dict(UnitFileState="enabled"),
                         "looping.service": dict(UnitFileState="disabled", ActiveState="activating")})
    units = _port_units.decide([
        unit("kimi.service", kimi, files=[kimi, drop], unit_file_state="enabled"),
        unit("looping.service", looping, active_state="activating"),  # Restart=always, the port taken
        unit("mine.service", mine, managed=True, unit_file_state="enabled")], "replace")
    done = _port_units.take_over(units, state, systemd, installed_at=mine, now=1796000000.0)
    assert systemd.calls == [["disable", "kimi.service"], ["stop", "looping.service"]]
    assert [d["unit"] for d in done] == ["kimi.service", "looping.service", "mine.service"]
    for path in (kimi, drop, looping, mine):
        backup = _state_dir.backup(state, path)
        assert open(backup).read() == open(path).read() and os.stat(backup).st_mode & 0o777 == 0o600, path
    kept = json.load(open(os.path.join(state, "units.json")))
    assert kept["units"][0]["before"] == {"UnitFileState": "enabled", "ActiveState": "inactive"}
    assert os.stat(os.path.join(state, "units.json")).st_mode & 0o777 == 0o600

    # a second takeover (a rerun: the unit now disabled, the operator's file edited) keeps what was, as it was
    with open(kimi, "a") as f:
        f.write("# edited\n")
    again = _port_units.decide([unit("kimi.service", kimi, files=[kimi, drop], unit_file_state="disabled")], "replace")
    assert again[0]["action"] == "leave"
    _port_units.take_over([dict(again[0], action="replace")], state, systemd)
    assert json.load(open(os.path.join(state, "units.json"))) == kept
    assert "# edited" not in open(_state_dir.backup(state, kimi)).read()

    # the managed unit overwrote the operator's file of its name; the rollback puts every file and state back
    with open(mine, "w") as f:
        f.write("# inferops.sglang.systemd_unit.\n[Service]\nRestart=on-failure\n")
    systemd.calls = []
    back = _port_units.restore(state, systemd)
    assert back == {"restored": ["kimi.service", "looping.service", "mine.service"], "serves": None}
    assert open(mine).read() == "[Service]\nType=simple\nRestart=always\n"
    assert "# edited" not in open(kimi).read() and os.stat(kimi).st_mode & 0o777 == 0o640
    assert systemd.calls == [["daemon-reload"], ["enable", "kimi.service"], ["enable", "mine.service"]]
    assert not os.path.exists(os.path.join(state, "units.json")) and _port_units.restore(state, systemd) is None


def test_a_rewritten_unit_whose_file_was_elsewhere_loses_the_managed_file_on_rollback(dirs, tmp_path):
    etc, run, lib = dirs
    state = str(tmp_path / "state")
    packaged = put(lib, "mine.service", "[Service]\nRestart=always\n")
    managed = os.path.join(etc, "mine.service")
    units = _port_units.decide([unit("mine.service", packaged, managed=True, active_state="active",
                                     holds_port=True)], "replace")
    _port_units.take_over(units, state, Systemd(), installed_at=managed)
    put(etc, "mine.service", "# inferops.sglang.systemd_unit.\n")
    systemd = Systemd()
    assert _port_units.restore(state, systemd) == {"restored": ["mine.service"], "serves": "mine.service"}
    assert not os.path.exists(managed) and open(packaged).read() == "[Service]\nRestart=always\n"
    assert systemd.calls == [["daemon-reload"]]


def test_what_changed_in_the_operators_file_setting_by_setting():
    before = "[Service]\nType=simple\nExecStart=/v/python --api-key sk-1\nRestart=always\nRestartSec=2\n[Install]\nWantedBy=multi-user.target\n"
    after = ("# managed\n[Service]\nType=exec\nExecStart=/v/python --api-key ${KEY}\nRestart=on-failure\n"
             "ExecStartPost=/v/gate\n[Install]\nWantedBy=multi-user.target\n")
    lines = _port_units.changes(before, after, redact=lambda t: t.replace("sk-1", "********"))
    assert lines == ["ExecStart: /v/python --api-key ******** -> /v/python --api-key ${KEY}",
                     "ExecStartPost: added (/v/gate)", "Restart: always -> on-failure", "RestartSec: removed (2)",
                     "Type: simple -> exec"]


def test_a_fifo_in_place_of_a_unit_file_is_not_waited_on(tmp_path):
    fifo = str(tmp_path / "x.service")
    os.mkfifo(fifo)
    assert _port_units.read_text(fifo) == ""
