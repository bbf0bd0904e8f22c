# -*- coding: utf-8 -*-
# Copyright: inferops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Hiding values that look like secrets in everything a module returns."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

MASK = "********"
# Command-line flags whose value is a secret, and environment names that hold one.
SECRET_FLAGS = ("--api-key", "--admin-api-key", "--hf-token", "--token", "--password")
_ENV_NAME = r"[A-Za-z_][A-Za-z0-9_]*(?:_TOKEN|_KEY|_SECRET|_PASSWORD|API_KEY|TOKEN)"


def argv_option(argv, name, default=None):
    """The value of `name X` or `name=X` in argv (the last one wins, as argparse does)."""
    value = default
    for i, arg in enumerate(argv):
        if arg == name and i + 1 < len(argv):
            value = argv[i + 1]
        elif str(arg).startswith(name + "="):
            value = arg[len(name) + 1:]
    return value


class Redactor:
    """redact(text) masks the values of secret flags, NAME_TOKEN=/NAME_KEY= assignments and given words."""

    def __init__(self, flags=(), values=()):
        flags = tuple(SECRET_FLAGS) + tuple(flags)
        self._flags = frozenset(flags)
        alt = "|".join(re.escape(f) for f in sorted(set(flags), key=len, reverse=True))
        self._flag = re.compile(r"(?<!\S)(%s)(=|\s+)(\S+)" % alt)
        self._env = re.compile(r"(?<![A-Za-z0-9_])(%s)=(\S+)" % _ENV_NAME)
        self._values = sorted((v for v in values if v), key=len, reverse=True)

    def __call__(self, text):
        if not isinstance(text, str):
            return text
        for v in self._values:
            text = text.replace(v, MASK)
        text = self._flag.sub(lambda m: m.group(1) + m.group(2) + MASK, text)
        return self._env.sub(lambda m: m.group(1) + "=" + MASK, text)

    def argv(self, argv):
        """The same for an argv list: the element after a secret flag is masked too."""
        out, hide_next = [], False
        for a in argv:
            if hide_next:
                out.append(MASK)
                hide_next = False
                continue
            flag, eq, dummy = a.partition("=")
            if flag in self._flags:
                out.append(flag + "=" + MASK if eq else a)
                hide_next = not eq
                continue
            out.append(self(a))
        return out

    def secrets_of(self, argv, env):
        """The secret values in an argv list and an environment, by the same rules that mask them."""
        values = [v for k, v in env.items() if re.match(r"(%s)$" % _ENV_NAME, k)]
        values += [argv[i + 1] for i, a in enumerate(argv[:-1]) if a in self._flags]
        values += [a.partition("=")[2] for a in argv if a.partition("=")[0] in self._flags and "=" in a]
        return [v for v in values if v]

    def env(self, env):
        """A dict of environment variables with secret-looking values masked."""
        return dict((k, MASK if re.match(r"(%s)$" % _ENV_NAME, k) else self(v)) for k, v in env.items())
