# -*- coding: utf-8 -*-
# Copyright: inferops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

# Documented in cutover_plan.yml and redact_argv.yml beside this file: the plan stage's filter (cutover_plan), and the
# masking of a command's secrets; the functions cutover_plan calls are plain functions, tested each on its own.

import os

from ansible.errors import AnsibleFilterError
from ansible_collections.inferops.sglang.plugins.filter.cutover_multinode import rank_of
from ansible_collections.inferops.sglang.plugins.module_utils._host.redact import Redactor
from ansible_collections.inferops.sglang.plugins.module_utils._server.sglang_args import served_model

# What a login shell adds that says nothing about the server; systemd sets HOME, USER, LOGNAME and SHELL itself.
SHELL_NOISE = ("PWD", "OLDPWD", "SHLVL", "_", "TERM", "COLORTERM", "LS_COLORS", "MAIL", "LESSOPEN", "LESSCLOSE",
               "DISPLAY", "MOTD_SHOWN", "COLUMNS", "LINES", "PS1", "PS2", "PROMPT_COMMAND", "HISTSIZE", "HISTFILESIZE",
               "HISTCONTROL", "TMUX", "TMUX_PANE", "STY", "WINDOW", "DBUS_SESSION_BUS_ADDRESS", "HOME", "USER",
               "LOGNAME", "SHELL", "VIRTUAL_ENV_PROMPT", "INVOCATION_ID", "JOURNAL_STREAM", "SYSTEMD_EXEC_PID")
SHELL_NOISE_PREFIXES = ("SSH_", "XDG_")
# the PATH systemd gives a service whose unit sets none
SYSTEMD_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def _noise(name):
    return name in SHELL_NOISE or name.startswith(SHELL_NOISE_PREFIXES)


def _strings(value, what):
    if not isinstance(value, (list, tuple)) or any(not isinstance(v, str) for v in value):
        raise AnsibleFilterError("%s must be a list of strings" % what)
    return list(value)


def adopt(capture, command=None, extra_args=None, environment=None, working_directory="", user="", group=""):
    """What the unit runs: the captured command (argv[0] resolved as the shell did), environment without shell
    noise, cwd and user; each part overridden by what the user gives. Without a PATH from either, a command of a
    venv's interpreter gets the venv's bin before systemd's own PATH."""
    capture = capture or {}
    command = _strings(command or [], "cutover_command")
    extra = _strings(extra_args or [], "cutover_extra_args")
    environment = environment or {}
    if not isinstance(environment, dict) or any(not isinstance(v, str) for v in environment.values()):
        raise AnsibleFilterError("cutover_environment must map names to strings (quote numbers in YAML)")
    if not command and not capture.get("argv"):
        raise AnsibleFilterError("there is no capture and no cutover_command: nothing says what the unit runs")
    if command:
        argv, source = command, "variables"
    else:
        first = capture.get("argv0_resolved") or capture.get("exe")
        argv, source = [first] + list(capture["argv"][1:]), "capture"
    argv = argv + extra
    env = dict((k, v) for k, v in (capture.get("environment") or {}).items() if not _noise(k))
    env.update(environment)
    exe = argv[0]
    venv = ""
    if os.path.basename(exe).startswith("python") or os.path.basename(exe) == "sglang":  # `sglang serve` too
        venv = os.path.dirname(os.path.dirname(exe))
    if venv and "PATH" not in env:  # no capture's nor the user's: the venv's tools first, as its activate script puts
        env["PATH"] = os.path.join(venv, "bin") + ":" + SYSTEMD_PATH  # them (SGLang's JIT runs the venv's ninja)
    return {
        "source": source,
        "command": argv,
        "environment": env,
        "working_directory": working_directory or capture.get("cwd") or "/",
        "user": user or capture.get("user") or "root",
        "group": group or capture.get("group") or "root",
        "venv": venv,
        "dropped": sorted(k for k in (capture.get("environment") or {}) if _noise(k) and k not in environment),
    }


def changes(capture, adopted, flags=None):
    """Lines saying how what runs now differs from what the unit will run, secrets masked."""
    capture = capture or {}
    now_argv = list(capture.get("argv") or [])
    now_env = capture.get("environment") or {}
    redact = Redactor(flags=flags or ())
    redact = Redactor(flags=flags or (), values=redact.secrets_of(now_argv + adopted["command"],
                                                                  dict(now_env, **adopted["environment"])))
    if not now_argv:
        return ["there is no capture of a server launched by hand: the unit comes from variables alone",
                "command: %s" % " ".join(redact.argv(adopted["command"]))]
    out = []
    new = adopted["command"]
    if now_argv[0] != new[0]:
        why = "as the shell resolved it on the captured PATH" if adopted["source"] == "capture" else "from cutover_command"
        out.append("argv[0]: %s -> %s (%s)" % (now_argv[0], new[0], why))
    old_rest, new_rest = redact.argv(now_argv[1:]), redact.argv(new[1:])
    if old_rest != new_rest:
        out.append("arguments now:      %s" % " ".join(old_rest))
        out.append("arguments the unit: %s" % " ".join(new_rest))
    new_env = adopted["environment"]
    noise = sorted(k for k in now_env if k not in new_env and _noise(k))
    if noise:
        out.append("env - shell noise: %s" % ", ".join(noise))
    for k in sorted(set(now_env) | set(new_env)):
        if k not in new_env:
            if not _noise(k):
                out.append("env - %s" % k)
        elif k not in now_env:
            out.append("env + %s=%s" % (k, redact.env({k: new_env[k]})[k]))
        elif now_env[k] != new_env[k]:
            out.append("env ~ %s=%s" % (k, redact.env({k: new_env[k]})[k]))
    if capture.get("cwd") != adopted["working_directory"]:
        out.append("working directory: %s -> %s" % (capture.get("cwd"), adopted["working_directory"]))
    if capture.get("user") != adopted["user"]:
        out.append("user: %s -> %s" % (capture.get("user"), adopted["user"]))
    return out or ["the unit runs exactly what runs now"]


def redact_argv(argv, flags=None):
    """argv with the values of secret flags (and their argparse prefixes, --api-k) and of secret-looking NAME=value
    elements masked: what a module that only parses the command (sglang_switch) is given, so that no secret reaches
    its arguments, the host's log of them, or a job's output."""
    return Redactor(flags=flags or ()).argv(_strings(argv, "the command"))


def cutover_plan(capture, command=None, extra_args=None, environment=None, working_directory="", user="", group="",
                 now=None, multinode=False):
    """The plan stage, one mapping: what the unit runs (adopt's keys: the capture, each part overridden by what the
    user gives); `changes`, how what runs now (now; the capture when not given) differs from it, secrets masked;
    `model`, the model the unit's command names where it names another than what runs now (model_named); and
    `rank`, this host's rank of a multi-node server read from that command, its secrets masked first (with multinode;
    else None)."""
    unit = adopt(capture, command, extra_args, environment, working_directory, user, group)
    before = capture if now is None else now
    return dict(unit, changes=changes(before, unit), model=model_named(before, unit),
                rank=rank_of(redact_argv(unit["command"])) if multinode else None)


def model_named(capture, adopted):
    """The model the unit's command names (--served-model-name, else --model-path) when it names another than what
    runs now did, or nothing ran: the model the unit must serve. None when it names the same one (the wait then
    expects the model served before) or cannot tell (a --config file)."""
    new = served_model(adopted["command"])
    return new if new and new != served_model((capture or {}).get("argv")) else None


class FilterModule(object):
    def filters(self):
        return {"cutover_plan": cutover_plan, "redact_argv": redact_argv}
