"""sglang_unit's manager: the unit, its environment file and its gate written for real in a folder, checked by the real
systemd-analyze; systemctl's answers are given (systemd is not PID 1 here) and what it was asked is kept."""
import os
import stat

import pytest

from ansible_collections.inferops.sglang.plugins.module_utils._host.files import sha1
from ansible_collections.inferops.sglang.plugins.module_utils._manager_sglang_unit import SglangUnit

from .conftest import Exited, Failed, FakeModule, run_command

UNIT = ("[Unit]\nDescription=SGLang on port 30000\nWants=network-online.target\nAfter=network-online.target\n"
        "[Service]\nType=exec\nExecStart=/bin/sleep 600\nEnvironmentFile=-/etc/inferops/sglang-30000.env\n"
        "[Install]\nWantedBy=multi-user.target\n")
ENV = "# managed\nHF_TOKEN=hf_secret\nPATH=/opt/sglang/bin:/usr/bin\n"


class Host(FakeModule):
    """systemctl on a host where sglang-30000.service is as `units` says; systemd-analyze and the rest run for real."""

    def __init__(self, tmp_path, units=None, version=None, refuse=(), check_mode=None, diff=None, **params):
        defaults = dict(name="sglang-30000", unit=UNIT, unit_dir=str(tmp_path / "units"), environment=ENV,
                        environment_path=str(tmp_path / "env" / "sglang-30000.env"), gate="#!/bin/sh\nexit 0\n",
                        gate_path=str(tmp_path / "gate" / "ready.sh"), wants=[], enabled=True, state="present",
                        restart_on_change=False, redact=[])
        FakeModule.__init__(self, check_mode, diff, **dict(defaults, **params))
        self.units = dict({"sglang-30000.service": dict(LoadState="not-found", ActiveState="inactive",
                                                        UnitFileState="")}, **(units or {}))
        self.version, self.refuse, self.asked = version, refuse, []

    def run_command(self, argv):
        if "systemctl" not in argv or (self.version is None and "--version" in argv):
            return run_command(argv)
        cmd = argv[argv.index("systemctl"):]
        if cmd[1] == "--version":
            return 0, "systemd %d (%d.1-1)\n+PAM\n" % (self.version, self.version), ""
        if cmd[1] == "show":
            props = cmd[2].split("=", 1)[1].split(",")
            blocks = ["".join("%s=%s\n" % (k, self.units.get(u, {}).get(k, "not-found" if k == "LoadState" else ""))
                              for k in props) for u in cmd[3:]]
            return 0, "\n".join(blocks), ""
        self.asked.append(cmd)
        if cmd[1] in self.refuse:
            return 1, "", "Job for sglang-30000.service failed because the control process exited with error code.\n"
        state = self.units["sglang-30000.service"]
        if cmd[1] == "daemon-reload":
            state["LoadState"] = "loaded"
        elif cmd[-2] in ("enable", "disable"):
            state["UnitFileState"] = cmd[-2] + "d"
        elif cmd[1] in ("start", "restart"):
            state["ActiveState"] = "active"
        return 0, "", ""


def result_of(module):
    with pytest.raises(Exited) as e:
        SglangUnit(module).run()
    assert not e.value.args[0].get("failed"), e.value.args[0]["msg"]
    return e.value.args[0]


def mode(path):
    return oct(stat.S_IMODE(os.stat(str(path)).st_mode))


def test_a_fresh_install_writes_verifies_enables_and_starts_then_a_rerun_changes_nothing(tmp_path):
    host = Host(tmp_path, state="started", wants=["nvidia-persistenced.service", "absent.service"],
                units={"nvidia-persistenced.service": dict(LoadState="loaded")})
    r = result_of(host)
    unit = tmp_path / "units" / "sglang-30000.service"
    paths = [str(unit), str(tmp_path / "env" / "sglang-30000.env"), str(tmp_path / "gate" / "ready.sh")]
    assert r["changed"] and r["changed_files"] == paths and r["unit"] == "sglang-30000.service" and r["unit_path"] == str(unit)
    assert host.asked == [["systemctl", "--no-reload", "enable", "sglang-30000.service"], ["systemctl", "daemon-reload"],
                          ["systemctl", "start", "sglang-30000.service"]]
    assert r["enabled_changed"] and r["reloaded"] and r["started"] and not r["restarted"] and not r["restart_needed"]
    assert r["wants_present"] == ["nvidia-persistenced.service"] and r["omitted"] == [] and r["systemd_version"] > 200
    text = unit.read_text()
    assert "Wants=network-online.target nvidia-persistenced.service\n" in text and "absent" not in text
    assert r["checksum"] == sha1(text) and r["environment_names"] == ["HF_TOKEN", "PATH"]
    assert (tmp_path / "env" / "sglang-30000.env").read_text() == ENV and mode(tmp_path / "env" / "sglang-30000.env") == "0o600"
    assert mode(tmp_path / "env") == "0o700" and mode(unit) == "0o644" and mode(tmp_path / "gate" / "ready.sh") == "0o644"
    assert "seconds" not in r and r["elapsed"] >= 0 and "diff" not in r and host.warnings == []
    rerun = Host(tmp_path, state="started", wants=["nvidia-persistenced.service", "absent.service"], units=host.units)
    again = result_of(rerun)
    assert not again["changed"] and again["changed_files"] == [] and not again["started"] and not again["reloaded"]
    assert rerun.asked == [] and again["checksum"] == r["checksum"]


def test_a_change_while_running_warns_unless_it_may_restart(tmp_path):
    units = {"sglang-30000.service": dict(LoadState="loaded", ActiveState="active", UnitFileState="enabled")}
    result_of(Host(tmp_path, units=units))
    host = Host(tmp_path, units=units, environment=ENV + "NCCL_DEBUG=INFO\n")
    r = result_of(host)
    assert r["changed"] and r["restart_needed"] and not r["restarted"] and not r["reloaded"] and host.asked == []
    assert r["changed_files"] == [str(tmp_path / "env" / "sglang-30000.env")]
    assert host.warnings == ["sglang-30000.service changed while running; it was NOT restarted (restart_on_change is "
                             "false). Restart it when convenient, or let the cutover do it."]
    host = Host(tmp_path, units=units, unit=UNIT.replace("sleep 600", "sleep 700"), restart_on_change=True)
    r = result_of(host)
    assert r["restarted"] and r["reloaded"] and not r["restart_needed"] and host.warnings == []
    assert host.asked == [["systemctl", "daemon-reload"], ["systemctl", "restart", "sglang-30000.service"]]


def test_check_mode_writes_and_runs_nothing_and_its_diff_hides_the_environment(tmp_path):
    host = Host(tmp_path, check_mode=True, diff=True, state="started")
    r = result_of(host)
    assert r["changed"] and r["started"] and r["enabled_changed"] and host.asked == []
    assert not (tmp_path / "units").exists() and not (tmp_path / "env").exists()
    env_diff = [d for d in r["diff"] if d["after_header"].endswith(".env")][0]
    assert env_diff["after"] == "# managed\nHF_TOKEN=********\nPATH=********\n" and env_diff["before"] == ""
    assert [d["after"] for d in r["diff"] if d["after_header"].endswith(".service")] == [UNIT]


def test_an_older_systemd_gets_the_unit_it_knows(tmp_path):
    r = result_of(Host(tmp_path, version=239))
    assert r["systemd_version"] == 239 and r["omitted"] == ["Type=exec (needs 240)"]
    assert "Type=simple\n" in (tmp_path / "units" / "sglang-30000.service").read_text()


def test_a_unit_systemd_analyze_rejects_is_not_installed(tmp_path):
    host = Host(tmp_path, unit=UNIT.replace("/bin/sleep", "/opt/missing/bin/python"), state="started")
    with pytest.raises(Failed) as e:
        SglangUnit(host).run()
    msg = e.value.args[0]["msg"]
    assert msg.startswith("systemd-analyze verify rejected the unit sglang-30000.service, so it was not installed: ")
    assert "/opt/missing/bin/python" in msg and not (tmp_path / "units").exists() and host.asked == []


def test_a_user_unit_with_a_line_that_runs_as_root_is_not_installed(tmp_path):
    """Defence in depth: whatever added it (a value written into the unit), an ExecStartPre=+ in a unit that runs as
    its owner is never written, verified or started."""
    unit = UNIT.replace("ExecStart=/bin/sleep 600\n", "ExecStart=/bin/sleep 600\nWorkingDirectory=/srv/w\n"
                        "ExecStartPre=+/srv/evil.sh\nUser=nobody\n")
    host = Host(tmp_path, unit=unit, state="started")
    with pytest.raises(Failed) as e:
        SglangUnit(host).run()
    msg = e.value.args[0]["msg"]
    assert msg.startswith("the unit sglang-30000.service runs as a user, yet would run this as root: line 9: "
                          "ExecStartPre=+/srv/evil.sh. Refused, nothing was written"), msg
    assert not (tmp_path / "units").exists() and not (tmp_path / "env").exists() and host.asked == []


def test_a_start_that_fails_fails_the_module_with_what_was_done(tmp_path):
    host = Host(tmp_path, state="started", refuse=("start",))
    with pytest.raises(Failed) as e:
        SglangUnit(host).run()
    r = e.value.args[0]
    assert r["msg"] == ("systemctl start sglang-30000.service failed (rc 1): Job for sglang-30000.service failed because "
                        "the control process exited with error code.")
    assert r["changed"] and r["started"] and len(r["changed_files"]) == 3
    assert (tmp_path / "units" / "sglang-30000.service").exists()


@pytest.mark.parametrize("params, message", [
    (dict(name="sglang-30000.service"), "name 'sglang-30000.service': give the service's name without .service"),
    (dict(name="-bad"), "name '-bad': give the service's name without .service"),
    (dict(environment_path="env/x.env"), "environment_path must be an absolute path, not 'env/x.env'"),
    (dict(gate_path="ready.sh"), "gate_path must be an absolute path, not 'ready.sh'"),
    (dict(sweep_path="sweep"), "sweep_path must be an absolute path, not 'sweep'"),
])
def test_bad_names_and_relative_paths_are_refused_before_anything(tmp_path, params, message):
    host = Host(tmp_path, **params)
    with pytest.raises(Failed, match=message):
        SglangUnit(host).run()
    assert host.asked == [] and not (tmp_path / "units").exists()


def test_the_shared_memory_sweep_is_installed_as_the_gate_is(tmp_path):
    """The ExecStartPre's script goes where sweep_path says (0644, root's), and a rerun changes nothing."""
    sweep = tmp_path / "bin" / "sweep"
    r = result_of(Host(tmp_path, sweep="# the sweep\n", sweep_path=str(sweep)))
    assert str(sweep) in r["changed_files"] and sweep.read_text() == "# the sweep\n" and mode(sweep) == "0o644"
    again = result_of(Host(tmp_path, sweep="# the sweep\n", sweep_path=str(sweep),
                           units={"sglang-30000.service": dict(LoadState="loaded", UnitFileState="enabled")}))
    assert again["changed_files"] == []
