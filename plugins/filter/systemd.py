# -*- coding: utf-8 -*-
# Copyright: inferops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

# Documented in systemd_exec_args.yml, systemd_env_file_value.yml and gate_python.yml beside this file.

import posixpath
import re

from ansible.errors import AnsibleFilterError
from ansible_collections.inferops.sglang.plugins.module_utils._redact import argv_option

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


def systemd_env_file_value(value):
    """A value for an EnvironmentFile line KEY=<value>: double-quoted, \\ " ` $ escaped, newlines kept."""
    if not isinstance(value, str):
        raise AnsibleFilterError("environment value %r is not a string" % (value,))
    return '"' + "".join("\\" + c if c in '\\"`$' else c for c in value) + '"'


def split_secrets(argv, flags):
    """{'argv': argv with secret values replaced by None, 'secret_vars': {index: VAR}, 'env': {VAR: value}}.

    `--api-key X` hides X; `--api-key=X` hides the whole element. VAR is INFEROPS_<FLAG>, e.g. INFEROPS_API_KEY.
    """
    flags = list(flags or [])
    secret_vars, env, hide_next = {}, {}, None
    for i, arg in enumerate(argv):
        if hide_next:
            secret_vars[i] = hide_next
            env[hide_next] = arg
            hide_next = None
            continue
        flag, eq, dummy = str(arg).partition("=")
        if flag in flags:
            var = "INFEROPS_" + flag.lstrip("-").upper().replace("-", "_")
            if eq:
                secret_vars[i] = var
                env[var] = arg
            else:
                hide_next = var
    return {"secret_vars": secret_vars, "env": env}


_PYTHON = re.compile(r"^python[0-9.]*$")


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
        return {"systemd_exec_args": systemd_exec_args, "systemd_env_file_value": systemd_env_file_value,
                "split_secrets": split_secrets, "argv_option": argv_option, "gate_python": gate_python}
