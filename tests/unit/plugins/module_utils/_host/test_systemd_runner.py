"""The one runner of systemctl (_host/systemd.py): each command line the collection gives systemctl, from its verb,
units and options, written in one place; run through the caller's run, under coreutils' timeout or as it is."""
import ast

import pytest

from ansible_collections.inferops.sglang.plugins.module_utils._host import systemd as _systemd
from ansible_collections.inferops.sglang.plugins.module_utils._host.command import CommandError
from ansible_collections.inferops.sglang.plugins.module_utils._host.systemd import Verbs
from tests.unit.conftest import ROOT


# (verb, units, options) -> argv: every command line the collection gives systemctl, as it has always written it
@pytest.mark.parametrize("verb, units, options, argv", [
    (Verbs.SHOW, ["a.service", "b.service"], dict(properties=("LoadState", "ActiveState")),
     ["systemctl", "show", "--property=LoadState,ActiveState", "a.service", "b.service"]),
    (Verbs.SHOW, "a.service", dict(properties="MainPID", value=True),
     ["systemctl", "show", "--property=MainPID", "--value", "a.service"]),
    (Verbs.SHOW, [], dict(properties=()), ["systemctl", "show", "--property="]),
    (Verbs.VERSION, (), {}, ["systemctl", "--version"]),
    (Verbs.DAEMON_RELOAD, (), {}, ["systemctl", "daemon-reload"]),
    (Verbs.ENABLE, "a.service", {}, ["systemctl", "enable", "a.service"]),
    (Verbs.ENABLE, "a.service", dict(no_reload=True), ["systemctl", "--no-reload", "enable", "a.service"]),
    (Verbs.DISABLE, "a.service", dict(no_reload=True), ["systemctl", "--no-reload", "disable", "a.service"]),
    (Verbs.ENABLE, "a.service", dict(no_reload=False, runtime=True), ["systemctl", "enable", "--runtime", "a.service"]),
    (Verbs.DISABLE, "a.service", dict(runtime=True), ["systemctl", "disable", "--runtime", "a.service"]),
    (Verbs.DISABLE, "a.service", dict(runtime=False), ["systemctl", "disable", "a.service"]),
    (Verbs.START, "a.service", {}, ["systemctl", "start", "a.service"]),
    (Verbs.START, "a.service", dict(no_block=True), ["systemctl", "start", "--no-block", "a.service"]),
    (Verbs.RESTART, "a.service", {}, ["systemctl", "restart", "a.service"]),
    (Verbs.STOP, "a.service", {}, ["systemctl", "stop", "a.service"]),
    (Verbs.STOP, "a.service", dict(no_block=True), ["systemctl", "stop", "--no-block", "a.service"]),
    (Verbs.KILL, "a.service", dict(signal="SIGKILL"), ["systemctl", "kill", "--signal=SIGKILL", "a.service"]),
    (Verbs.RESET_FAILED, "a-adopted-watch.service", {}, ["systemctl", "reset-failed", "a-adopted-watch.service"]),
    (Verbs.STOP, ("a.service", "b.service"), dict(no_block=None), ["systemctl", "stop", "a.service", "b.service"]),
])
def test_argv_writes_each_verb_and_option_so(verb, units, options, argv):
    assert _systemd.argv(verb, units, **options) == argv


@pytest.mark.parametrize("verb, options, named", [
    ("is-active", {}, "is-active"),
    ("start; reboot", {}, "start; reboot"),
    (Verbs.STOP, dict(force=True), "force"),
    (Verbs.STOP, dict(force=True, now=True), "force, now"),
])
def test_a_verb_or_option_outside_the_tables_is_refused(verb, options, named):
    with pytest.raises(KeyError) as e:
        _systemd.argv(verb, "a.service", **options)
    assert e.value.args == (named,)


def test_every_verb_is_in_the_table():
    assert sorted(_systemd.VERBS) == sorted(["show", "start", "stop", "restart", "kill", "reset-failed", "enable",
                                             "disable", "daemon-reload", "--version"])


class Recorder:
    def __init__(self, rc=0, out="", err=""):
        self.answer, self.calls = (rc, out, err), []

    def __call__(self, argv):
        self.calls.append(argv)
        return self.answer


@pytest.mark.parametrize("timeout, ran", [
    (15, ["timeout", "-k", "2", "15", "systemctl", "stop", "--no-block", "a.service"]),
    (0.5, ["timeout", "-k", "2", "1", "systemctl", "stop", "--no-block", "a.service"]),
    (None, ["systemctl", "stop", "--no-block", "a.service"]),
])
def test_systemctl_runs_through_the_callers_run_under_its_timeout(timeout, ran):
    run = Recorder(1, "", "failed\n")
    assert _systemd.systemctl(run, Verbs.STOP, "a.service", timeout, no_block=True) == (1, "", "failed\n")
    assert run.calls == [ran]


def test_the_default_timeout_is_the_modules():
    run = Recorder()
    _systemd.systemctl(run, Verbs.DAEMON_RELOAD)
    assert run.calls == [["timeout", "-k", "2", str(_systemd.TIMEOUT), "systemctl", "daemon-reload"]]


def test_a_systemctl_that_runs_out_of_time_raises():
    with pytest.raises(CommandError) as e:
        _systemd.systemctl(Recorder(124), Verbs.START, "a.service", 30, no_block=True)
    assert str(e.value) == "systemctl did not answer within 30 s"


def test_a_prepared_argv_runs_as_the_runner_runs_it():
    run = Recorder()
    _systemd.call(run, _systemd.argv(Verbs.RESTART, "a.service"), None)
    _systemd.call(run, _systemd.argv(Verbs.ENABLE, "a.service"), 120)
    assert run.calls == [["systemctl", "restart", "a.service"],
                         ["timeout", "-k", "2", "120", "systemctl", "enable", "a.service"]]


def systemctl_lists(path):
    """(line, argv's first words) of each list written in path's code whose first element is "systemctl"."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.List) and node.elts and getattr(node.elts[0], "value", None) == "systemctl":
            found.append((node.lineno, [getattr(e, "value", "?") for e in node.elts[:2]]))
    return found


def test_no_systemctl_command_line_is_written_outside_the_runner():
    """Only _host/systemd.py writes a systemctl argv. Not counted: the adoption's watcher (_host/scope.py's WATCHER,
    a program of its own, run outside the collection, standard library only) and the roles' files, which run on the
    host without the collection."""
    plugins = ROOT / "plugins"
    found = dict((str(p.relative_to(plugins)), systemctl_lists(p)) for p in sorted(plugins.rglob("*.py"))
                 if p != plugins / "module_utils" / "_host" / "systemd.py")
    assert dict((p, lines) for p, lines in found.items() if lines) == {}
    assert len(systemctl_lists(plugins / "module_utils" / "_host" / "systemd.py")) == 1


def test_the_check_finds_a_systemctl_list(tmp_path):
    code = tmp_path / "x.py"
    code.write_text('def f(run, unit):\n    return run(["systemctl", "stop", unit])\n')
    assert systemctl_lists(code) == [(2, ["systemctl", "stop"])]
