# -*- coding: utf-8 -*-
# Copyright: inferops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

# Documented in systemd_exec_args.yml, systemd_exec_path.yml, systemd_value.yml, systemd_env_file_value.yml,
# systemd_unit_problems.yml and gate_python.yml beside this file.

import ipaddress
import posixpath
import re

from ansible.errors import AnsibleFilterError
from ansible_collections.inferops.sglang.plugins.module_utils._host.redact import SECRET_FLAGS, argv_option, secret_flag
from ansible_collections.inferops.sglang.plugins.module_utils._specs import is_unit_name

_C_ESCAPES = {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\t": "\\t", "\r": "\\r"}


def _word(arg):
    if arg == ";":
        return "\\;"
    out = []
    for ch in arg:
        if ch in _C_ESCAPES:
            out.append(_C_ESCAPES[ch])
        elif ch == "%":
            out.append("%%")
        elif ch == "$":
            out.append("$$")
        elif ord(ch) < 32:
            out.append("\\x%02x" % ord(ch))
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def systemd_exec_args(argv, secret_vars=None):
    if not isinstance(argv, (list, tuple)) or not argv:
        raise AnsibleFilterError("systemd_exec_args wants a non-empty argv list, not %r" % (argv,))
    secret_vars = dict((int(k), v) for k, v in (secret_vars or {}).items())
    words = []
    for i, arg in enumerate(argv):
        if not isinstance(arg, str):
            raise AnsibleFilterError("argv element %d (%r) is not a string" % (i, arg))
        words.append("${%s}" % secret_vars[i] if i in secret_vars else _word(arg))
    return " ".join(words)


# A control character would end a unit's line (a newline) and start another of the value's choosing
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_PLAIN_PATH = re.compile(r"/[A-Za-z0-9_./+-]*\Z")   # an executable written as it is
_NOT_IN_PATH = re.compile(r"[$\\\"'`]")           # never in an executable's path (written literally by systemd)
_HOST_NAME = re.compile(r"(?=.{1,253}\Z)[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
                        r"(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*\.?\Z")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_ACCOUNT = re.compile(r"(?:[A-Za-z_][A-Za-z0-9_.-]*\$?|[0-9]+)\Z")
_LIMIT_KEY = re.compile(r"Limit[A-Z]+\Z")
_LIMIT_VALUE = re.compile(r"[A-Za-z0-9:]+\Z")
_KILL_MODES = ("control-group", "mixed", "process", "none")
_RESTARTS = ("no", "on-success", "on-failure", "on-abnormal", "on-watchdog", "on-abort", "always")


def _control(text):
    """The first control character of text, as repr() shows it, or None."""
    m = _CONTROL.search(text)
    return repr(m.group(0))[1:-1] if m else None


def systemd_value(value):
    """A value for a unit's Key=value line (Description=, WorkingDirectory=, User=...): % doubled, so no specifier
    expands. A control character (a newline would end the line and start another) or a backslash at the end (it
    joins the next line to this one) is refused."""
    if not isinstance(value, (str, int)) or isinstance(value, bool):
        raise AnsibleFilterError("a unit's value must be a string, not %r" % (value,))
    text = str(value)
    if _control(text) or text.endswith("\\"):
        raise AnsibleFilterError("%r holds a control character or ends with a backslash: refused in a unit's value "
                                 "(it would end the line, or join the next one)" % text)
    return text.replace("%", "%%")


def systemd_exec_path(path, prefix=""):
    """An executable's path for an Exec*= line, after its prefix (@ and the like): as it is when it holds only
    letters, digits and _ . / + -; else double-quoted, % doubled (a space, a %). Refused: a path that is not
    absolute, or holds a control character, $, a backslash or a quote."""
    if not isinstance(path, str) or not path.startswith("/") or _control(path) or _NOT_IN_PATH.search(path) \
            or path != path.strip():
        raise AnsibleFilterError("%r is no executable's path for a unit: an absolute path without control characters, "
                                 "$, backslashes, quotes or spaces at its ends" % (path,))
    if _PLAIN_PATH.match(path):
        return prefix + path
    return '"%s%s"' % (prefix, path.replace("%", "%%"))


def _path_problem(path):
    """Why a path cannot be a unit's value (WorkingDirectory=, RequiresMountsFor=), or None."""
    if not isinstance(path, str) or not path.startswith("/"):
        return "not an absolute path"
    if _control(path):
        return "holds a control character (%s): a unit's value ends at a newline, so it could add a line" % _control(path)
    if "\\" in path:
        return "holds a backslash (at a line's end it joins the next line)"
    if path != path.strip():
        return "starts or ends with a space, which systemd strips"
    return None


def _count_problem(value):
    if isinstance(value, bool) or not (isinstance(value, int) and value >= 0 or isinstance(value, str) and value.isdigit()):
        return "not a whole number of seconds (or a count)"
    return None


def systemd_unit_problems(inputs):
    """What keeps the systemd_unit role's inputs (a dict: its variables without the systemd_unit_ prefix, and the gate's
    host and port) from being written into a unit, each naming the variable, its value and the rule; [] when nothing
    does. Every value that reaches the unit is checked here, before anything is rendered or written."""
    out = []

    def bad(name, value, rule):
        out.append("systemd_unit_%s %r: %s" % (name, value, rule))

    name = inputs.get("name")
    if not isinstance(name, str) or not is_unit_name(name):
        bad("name", name, "letters, digits and _ . : - only (an optional @instance), without .service")
    command = inputs.get("command")
    if not isinstance(command, (list, tuple)) or not command or any(not isinstance(a, str) for a in command):
        bad("command", command, "an argv list of strings, not empty")
    else:
        try:
            systemd_exec_path(command[0])
        except AnsibleFilterError:
            bad("command[0]", command[0], "an absolute path without control characters, $, backslashes or quotes "
                                          "(spaces and % are escaped)")
        for i, arg in enumerate(command[1:], 1):
            if "\x00" in arg:
                bad("command[%d]" % i, arg, "holds a NUL, which no argument can")
    argv0 = inputs.get("argv0")
    if not isinstance(argv0, str) or "\x00" in argv0:
        bad("argv0", argv0, "a string without NUL")
    for key in ("description", "user", "group"):
        value = inputs.get(key)
        if not isinstance(value, str) or _control(value):
            bad(key, value, "a string without control characters (a newline would end the unit's line)")
    for key in ("user", "group"):
        value = inputs.get(key)
        if isinstance(value, str) and not _control(value) and not _ACCOUNT.match(value):
            bad(key, value, "a user or group name (letters, digits, _ . -) or a number")
    why = _path_problem(inputs.get("working_directory"))
    if why:
        bad("working_directory", inputs.get("working_directory"), why)
    mounts = inputs.get("requires_mounts_for")
    if not isinstance(mounts, (list, tuple)):
        bad("requires_mounts_for", mounts, "a list of absolute paths")
    else:
        for path in mounts:
            why = _path_problem(path) or (" " in path and "holds a space, which separates RequiresMountsFor= paths")
            if why:
                bad("requires_mounts_for", path, why)
    env = inputs.get("environment")
    if not isinstance(env, dict):
        bad("environment", env, "a mapping of names to strings")
    else:
        for key, value in env.items():
            if not isinstance(key, str) or not _ENV_NAME.match(key):
                bad("environment", key, "a variable's name is [A-Za-z_][A-Za-z0-9_]*")
            elif not isinstance(value, str) or "\x00" in value:
                bad("environment", {key: value}, "a value is a string without NUL (quote numbers in YAML)")
    limits = inputs.get("limits")
    if not isinstance(limits, dict):
        bad("limits", limits, "a mapping of Limit* settings to values")
    else:
        for key, value in limits.items():
            if not isinstance(key, str) or not _LIMIT_KEY.match(key):
                bad("limits", key, "a Limit* setting such as LimitNOFILE")
            elif isinstance(value, bool) or not _LIMIT_VALUE.match(str(value)):
                bad("limits", {key: value}, "a number, infinity, or SOFT:HARD")
    for key in ("timeout_start_sec", "timeout_stop_sec", "restart_sec", "start_limit_interval_sec",
                "start_limit_burst"):
        why = _count_problem(inputs.get(key))
        if why:
            bad(key, inputs.get(key), why)
    if inputs.get("kill_mode") not in _KILL_MODES:
        bad("kill_mode", inputs.get("kill_mode"), "one of %s" % ", ".join(_KILL_MODES))
    if inputs.get("restart") not in _RESTARTS:
        bad("restart", inputs.get("restart"), "one of %s" % ", ".join(_RESTARTS))
    flags = inputs.get("secret_flags")
    if not isinstance(flags, (list, tuple)) or [f for f in flags
                                                if not isinstance(f, str) or not f.startswith("--") or _control(f)]:
        bad("secret_flags", flags, "a list of long options (--api-key)")
    if inputs.get("liveness") and inputs.get("readiness_gate"):
        interval, watchdog = inputs.get("liveness_interval_sec"), inputs.get("watchdog_sec")
        why = _count_problem(interval) or (int(interval) < 1 and "at least 1 second")
        if why:
            bad("liveness_interval_sec", interval, why)
        env = inputs.get("environment") if isinstance(inputs.get("environment"), dict) else {}
        probe = env.get("SGLANG_HEALTH_CHECK_TIMEOUT", "20")
        probe = int(probe) + 10 if isinstance(probe, str) and probe.isdigit() else 30
        why = _count_problem(watchdog)
        if not why and not _count_problem(interval) and int(watchdog) <= int(interval) + probe:
            why = ("more than liveness_interval_sec (%s) plus a probe's longest wait (%d s: SGLANG_HEALTH_CHECK_TIMEOUT "
                   "plus 10), or a server that answers slowly would be restarted" % (interval, probe))
        if why:
            bad("watchdog_sec", watchdog, why)
    if inputs.get("readiness_gate"):
        host = inputs.get("ready_host")
        if not _is_host(host):
            out.append("the command's --host %r: the readiness gate asks it, so it must be an IP address or a host "
                       "name" % (host,))
        port = inputs.get("ready_port")
        if _count_problem(port) or not 0 < int(port) < 65536:
            out.append("the command's --port %r: the readiness gate asks it, so it must be a port number (1-65535)"
                       % (port,))
    return out


def _is_host(host):
    if not isinstance(host, str):
        return False
    try:
        ipaddress.ip_address(host[1:-1] if host.startswith("[") and host.endswith("]") else host)
        return True
    except ValueError:
        return bool(_HOST_NAME.match(host))


def systemd_env_file_value(value):
    """A value for an EnvironmentFile line KEY=<value>: double-quoted, \\ " ` $ escaped, newlines kept."""
    if not isinstance(value, str):
        raise AnsibleFilterError("environment value %r is not a string" % (value,))
    return '"' + "".join("\\" + c if c in '\\"`$' else c for c in value) + '"'


def split_secrets(argv, flags):
    """{'argv': argv with secret values replaced by None, 'secret_vars': {index: VAR}, 'env': {VAR: value}}.

    `--api-key X` hides X; `--api-key=X` hides the whole element; a prefix argparse takes for the flag (`--api-k X`)
    counts as the flag. VAR is INFEROPS_<FLAG>, e.g. INFEROPS_API_KEY. The flags are `flags` and always SECRET_FLAGS
    (every secret option of SGLang, --ssl-keyfile-password included): a list given cannot leave one in ExecStart.
    """
    flags = sorted(set(SECRET_FLAGS) | set(flags or []))
    secret_vars, env, hide_next = {}, {}, None
    for i, arg in enumerate(argv):
        if hide_next:
            secret_vars[i] = hide_next
            env[hide_next] = arg
            hide_next = None
            continue
        flag = secret_flag(arg, flags)
        if flag:
            var = "INFEROPS_" + flag.lstrip("-").upper().replace("-", "_")
            if "=" in str(arg):
                secret_vars[i] = var
                env[var] = arg
            else:
                hide_next = var
    return {"secret_vars": secret_vars, "env": env}


_PYTHON = re.compile(r"^python[0-9.]*\Z")


def gate_python(executable):
    """The interpreter the readiness gate runs with: the unit's own. The executable itself when it is a python (the
    venv's python that ExecStart runs), else the python3 beside it (a console script such as /venv/bin/sglang: a
    venv's bin has python3 beside it, the interpreter its shebang names)."""
    if not isinstance(executable, str) or not executable.startswith("/"):
        raise AnsibleFilterError("gate_python wants the unit's executable, an absolute path, not %r" % (executable,))
    if _PYTHON.match(posixpath.basename(executable)):
        return executable
    return posixpath.join(posixpath.dirname(executable), "python3")


class FilterModule(object):
    def filters(self):
        return {"systemd_exec_args": systemd_exec_args, "systemd_exec_path": systemd_exec_path,
                "systemd_value": systemd_value, "systemd_unit_problems": systemd_unit_problems,
                "systemd_env_file_value": systemd_env_file_value, "split_secrets": split_secrets,
                "argv_option": argv_option, "gate_python": gate_python}
