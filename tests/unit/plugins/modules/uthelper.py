"""Module tests driven by data, in the manner of community.general's tests/unit/plugins/modules/uthelper.py: a YAML
beside each test file (test_MODULE.yaml) holds its cases, each the module's input, its flags (check, diff), the fake
host (the commands it runs through run_command, answered in order; files put in a temporary folder first; real
processes spawned for it, which must still run after it when it is in check mode) and what
comes back (the result's values, or the failure and its message), with the files it must or must not leave.

The module runs whole - its main(), its AnsibleModule, its manager - in this process; {tmp} in any string of a case
is its temporary folder, {python} this interpreter. A command the case does not list fails the test, as does one
it lists that never ran."""
import json
import os
import subprocess
import sys
import time

import pytest
import yaml

from ansible.module_utils import basic
from ansible.module_utils.testing import patch_module_args

CASE_KEYS = {"id", "input", "flags", "run_command", "files", "spawn", "output", "contains", "failed", "absent",
             "present", "absent_keys"}


def substituted(value, tmp):
    """value with {tmp} and {python} replaced in every string it holds (a dict's keys too: the files' paths)."""
    if isinstance(value, str):
        return value.replace("{tmp}", str(tmp)).replace("{python}", sys.executable)
    if isinstance(value, list):
        return [substituted(v, tmp) for v in value]
    if isinstance(value, dict):
        return dict((substituted(k, tmp), substituted(v, tmp)) for k, v in value.items())
    return value


class Commands:
    """run_command answered from the case: each call must be the next command listed (argv equal, or its first
    words equal when the case lists `prefix: true`). A command run under timeout(1) - `timeout -k 2 15 ARGV`, the
    limit _host.command.timed puts on it - is compared as ARGV."""

    def __init__(self, expected):
        self.expected = list(expected)
        self.ran = []

    def __call__(self, args, **kwargs):  # pylint: disable=unused-argument
        argv = [str(a) for a in args] if isinstance(args, (list, tuple)) else str(args).split()
        if argv[:2] == ["timeout", "-k"]:
            argv = argv[4:]
        self.ran.append(argv)
        if not self.expected:
            raise AssertionError("the module ran a command the case does not list: %r" % (argv,))
        want = self.expected.pop(0)
        command = [str(a) for a in want["command"]]
        if argv != command and not (want.get("prefix") and argv[:len(command)] == command):
            raise AssertionError("the module ran %r where the case expects %r" % (argv, command))
        return want.get("rc", 0), want.get("out", ""), want.get("err", "")


def load(test_file):
    """The cases of the YAML beside test_file, each checked for unknown keys."""
    path = os.path.splitext(test_file)[0] + ".yaml"
    with open(path) as f:
        spec = yaml.safe_load(f)
    unknown = set(spec) - {"anchors", "test_cases"}
    if unknown:
        raise ValueError("%s: unknown sections %s" % (path, sorted(unknown)))
    for case in spec["test_cases"]:
        wrong = set(case) - CASE_KEYS
        if wrong:
            raise ValueError("%s: case %s has unknown keys %s" % (path, case.get("id"), sorted(wrong)))
    return spec["test_cases"]


def spawn(how):
    """A real process: its argv, or {argv, stdin}: stdin, a file it holds open from its start (a GPU's device file).
    Returned once it runs its own program: until its exec, /proc shows it with this interpreter's command line, and a
    module that looks once (check mode) would not find it."""
    argv = how if isinstance(how, list) else how["argv"]
    if isinstance(how, list):
        proc = subprocess.Popen(how)
    else:
        with open(how["stdin"]) as f:
            proc = subprocess.Popen(how["argv"], stdin=f)
    want = ("\0".join(argv) + "\0").encode()
    deadline = time.time() + 30
    while time.time() < deadline and proc.poll() is None:
        with open("/proc/%d/cmdline" % proc.pid, "rb") as f:
            if f.read() == want:
                break
        time.sleep(0.01)
    return proc


def run(module, case, tmp, monkeypatch, capfd):
    """The module's result for the case (its JSON, as the controller reads it), the fake host's commands all run."""
    case = substituted(case, tmp)
    for name, text in (case.get("files") or {}).items():
        os.makedirs(os.path.dirname(name), exist_ok=True)
        with open(name, "w") as f:
            f.write(text)
    spawned = [spawn(how) for how in case.get("spawn") or []]
    try:
        return case, module_result(module, case, monkeypatch, capfd, spawned)
    finally:
        for proc in spawned:
            proc.kill()
            proc.wait()


def module_result(module, case, monkeypatch, capfd, spawned):
    commands = Commands(case.get("run_command") or [])
    monkeypatch.setattr(basic.AnsibleModule, "run_command", lambda module, args, **kw: commands(args, **kw))
    args = dict(case.get("input") or {})
    flags = case.get("flags") or {}
    args.update(_ansible_check_mode=bool(flags.get("check")), _ansible_diff=bool(flags.get("diff")))
    capfd.readouterr()
    with patch_module_args(args), pytest.raises(SystemExit):
        module.main()
    out, err = capfd.readouterr()
    assert out.strip().startswith("{"), "the module printed no result: %r %r" % (out, err)
    result = json.loads(out)
    assert commands.expected == [], "commands the case lists that never ran: %r (ran %r)" % (
        commands.expected, commands.ran)
    if flags.get("check"):
        assert [p.pid for p in spawned if p.poll() is not None] == [], "check mode ended a process"
    return result


def check(case, result):
    """What the case expects of the result, and of the files left behind."""
    assert bool(result.get("failed")) == bool(case.get("failed")), result
    for key, value in (case.get("output") or {}).items():
        assert key in result and result[key] == value, (key, result.get(key, "(absent)"), value, result)
    for key, text in (case.get("contains") or {}).items():
        assert text in str(result.get(key)), (key, result.get(key), text)
    for key in case.get("absent_keys") or []:
        assert key not in result, (key, result[key])
    for path in case.get("absent") or []:
        assert not os.path.lexists(path), "%s exists" % path
    for path in case.get("present") or []:
        assert os.path.exists(path), "%s does not exist" % path


def cases_of(test_file):
    """pytest's parameters: one a case, its id the case's."""
    return [pytest.param(c, id=c["id"]) for c in load(test_file)]
