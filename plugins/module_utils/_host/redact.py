# -*- coding: utf-8 -*-
# Copyright: inferops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Hiding values that look like secrets in everything a module returns."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

MASK = "********"
# Command-line flags whose value is a secret. The rule, for SGLang's own options: an option looks secret when a word
# of its name (the parts between its dashes) says password, secret, token or key - is `password`, `passwd`,
# `passphrase`, `secret` or `token`, or begins or ends with `key` (`keyfile`, `apikey`); `tokens` and `tokenizer` are
# the model's text, no credential. Every option that looks secret, of every supported SGLang version (each version's
# parser), is either here (its value is a secret) or in NOT_SECRET with why its value is none: a path naming a key
# file is no secret (the key is the file's content, kept by its owner), its password is; a number or a file about
# the model's text tokens is none. tests/conformance checks both lists against the options of every supported wheel.
# --hf-token, --token and --password are no SGLang options: the commands around it (huggingface-cli, a wrapper's
# own flags) take them. argparse also takes any unambiguous prefix of an option (--api-k for --api-key), so each
# prefix of three characters or more (--a...) counts as the flag, unless it is an option of its own (NOT_SECRET:
# --ssl-keyfile is no prefix of --ssl-keyfile-password).
SECRET_FLAGS = ("--api-key", "--admin-api-key", "--ssl-keyfile-password", "--hf-token", "--token", "--password")
NOT_SECRET = {
    "--ssl-keyfile": "a path: the TLS key is the file's content, kept by its owner; its password is a secret",
    "--speculative-token-map": "a path to the draft model's token-id map",
    "--bucket-time-to-first-token": "histogram buckets (seconds) of the latency to the first text token",
    "--bucket-inter-token-latency": "histogram buckets (seconds) of the latency between text tokens",
    "--ds-heavy-token-num": "a count of text tokens",
    "--kt-max-deferred-experts-per-token": "a count of experts per text token",
    "--tbo-token-distribution-threshold": "a ratio of text tokens",
    "--prefill-delayer-token-usage-low-watermark": "a ratio of text-token usage",
}
_SECRET_WORD = re.compile(r"^(?:password|passwd|passphrase|secret|token|key.*|.*key)\Z")


def looks_secret(option):
    """Whether an option's name says password, secret, token or key (the rule above SECRET_FLAGS)."""
    return any(_SECRET_WORD.match(w) for w in str(option).lstrip("-").lower().split("-"))


# Environment names that hold a secret (any case): ...TOKEN, ..._KEY, ...APIKEY, ..._PASS, ..._PWD at the end;
# PASSWORD, PASSWD, PASSPHRASE, SECRET, CREDENTIAL, _AUTH anywhere.
_SECRET_NAME = re.compile(r"(?:TOKEN|_KEY|APIKEY|_PASS|_PWD)\Z|PASSWORD|PASSWD|PASSPHRASE|SECRET|CREDENTIAL|_AUTH", re.I)


def is_secret_name(name):
    """Whether an environment variable of this name holds a secret (DB_PASS, HF_TOKEN, AWS_SECRET_ACCESS_KEY...)."""
    return bool(_SECRET_NAME.search(name))


def secret_flag(arg, flags=SECRET_FLAGS):
    """The flag of `flags` that an argument (`--flag`, `--flag=value`, a short `-c`) names, as argparse reads it:
    itself, or a long flag it is a prefix of (three characters or more); None when it names none."""
    name = str(arg).partition("=")[0]
    if name in flags:
        return name
    if len(name) < 3 or not name.startswith("--") or name in NOT_SECRET:
        return None
    hits = sorted(f for f in flags if f.startswith(name))
    return hits[0] if hits else None


# SGLang's --port when a command line gives none (ServerArgs.port: 30000 in every supported version; tests/conformance
# reads it in each wheel). The one place the collection's Python says it: the port option's default (_specs.PORT_SPEC)
# and the port a command serves (_server/port_units.port_of) take it from here; the roles' defaults and argument_specs
# write it as a literal (an argument spec takes no expression).
DEFAULT_PORT = 30000


def argv_option(argv, name, default=None):
    """The value of `name X` or `name=X` in argv (the last one wins, as argparse does). The one reader of an option's
    value (--port of the role's inputs, of boot lines, of units' ExecStart): none other takes the first."""
    value = default
    for i, arg in enumerate(argv):
        if arg == name and i + 1 < len(argv):
            value = argv[i + 1]
        elif str(arg).startswith(name + "="):
            value = arg[len(name) + 1:]
    return value


# a quoted field of a repr: SGLang logs `server_args=ServerArgs(..., api_key='...', ...)` at start
_QUOTED = re.compile(r"(?<![A-Za-z0-9_])([A-Za-z_][A-Za-z0-9_]*)=(['\"])(.*?)\2")


class Redactor:
    """redact(text) masks the values of secret flags (and their prefixes), NAME=value assignments of secret names
    (and a repr's quoted name='value', whole, spaces and all: api_key, admin_api_key, hf_token...) and given words."""

    def __init__(self, flags=(), values=()):
        self._flags = tuple(sorted(set(tuple(SECRET_FLAGS) + tuple(flags))))
        # a flag and its value: the value never starts with "-" (argparse takes that for the next option)
        self._flag = re.compile(r"(?<!\S)(--?[A-Za-z0-9][A-Za-z0-9_.-]*)(=|\s+)(?!-)(\S+)")
        self._env = re.compile(r"(?<![A-Za-z0-9_])([A-Za-z_][A-Za-z0-9_]*)=(\S+)")
        self._values = sorted((v for v in values if v), key=len, reverse=True)

    def is_secret(self, arg):
        """Whether the argument is a secret flag of this redactor (or a prefix of one)."""
        return secret_flag(arg, self._flags) is not None

    def __call__(self, text):
        if not isinstance(text, str):
            return text
        out, at = [], 0
        for m in _QUOTED.finditer(text):  # a quoted secret whole; the rest as _plain masks it
            if is_secret_name(m.group(1)):
                out += [self._plain(text[at:m.start()]), m.group(1) + "=" + m.group(2) + MASK + m.group(2)]
                at = m.end()
        return "".join(out + [self._plain(text[at:])])

    def _plain(self, text):
        for v in self._values:
            text = text.replace(v, MASK)
        text = self._flag.sub(lambda m: m.group(1) + m.group(2) + MASK if self.is_secret(m.group(1)) else m.group(0),
                              text)
        return self._env.sub(lambda m: m.group(1) + "=" + MASK if is_secret_name(m.group(1)) else m.group(0), text)

    def argv(self, argv):
        """The same for an argv list: the element after a secret flag is masked too."""
        out, hide_next = [], False
        for a in argv:
            if hide_next:
                out.append(MASK)
                hide_next = False
                continue
            if self.is_secret(a):
                flag, eq, dummy = a.partition("=")
                out.append(flag + "=" + MASK if eq else a)
                hide_next = not eq
                continue
            out.append(self(a))
        return out

    def secrets_of(self, argv, env):
        """The secret values in an argv list and an environment, by the same rules that mask them."""
        values = [v for k, v in env.items() if is_secret_name(k)]
        for i, a in enumerate(argv):
            flag, eq, value = a.partition("=")
            if self.is_secret(a):
                following = argv[i + 1] if i + 1 < len(argv) else ""
                values.append(value if eq else "" if following.startswith("-") else following)
            elif eq and not flag.startswith("-") and is_secret_name(flag):
                values.append(value)  # `env DB_PASS=x python ...`
        return [v for v in values if v]

    def env(self, env):
        """A dict of environment variables with secret-looking values masked."""
        return dict((k, MASK if is_secret_name(k) else self(v)) for k, v in env.items())
