# -*- coding: utf-8 -*-
# Copyright: inferops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Boot launchers: @reboot crontab lines and rc.local lines that would start a second copy of a server at boot."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import re
import shlex

from ansible_collections.inferops.sglang.plugins.module_utils._server.family import SHELLS, is_sglang_command
from ansible_collections.inferops.sglang.plugins.module_utils._server.port_units import port_of
from ansible_collections.inferops.sglang.plugins.module_utils._host.owner import read_text

# Where each layout keeps them; a host has some of these, and what it has is read (never guessed from its name):
# rc.local is /etc/rc.local (Debian; a link to the next one on RHEL) or /etc/rc.d/rc.local (RHEL family); root's
# crontab is /var/spool/cron/crontabs/root (Debian) or /var/spool/cron/root (RHEL family).
RC_LOCAL = ("etc/rc.d/rc.local", "etc/rc.local")
BOOT_FILES = ("etc/crontab",) + RC_LOCAL
BOOT_DIRS = ("etc/cron.d", "var/spool/cron/crontabs", "var/spool/cron")
DISABLED = "# disabled by inferops.sglang cutover"


def boot_files(root="/"):
    """The boot files this host has under `root`, each once (rc.local's link to rc.d/rc.local is the same file):
    [(path, is_crontab)]."""
    paths = [(os.path.join(root, f), f not in RC_LOCAL) for f in BOOT_FILES]
    for d in BOOT_DIRS:
        folder = os.path.join(root, d)
        try:
            names = sorted(n for n in os.listdir(folder) if not n.startswith("."))
        except OSError:
            continue
        paths += [(os.path.join(folder, n), True) for n in names]
    found, seen = [], set()
    for path, crontab in paths:
        real = os.path.realpath(path)
        if real in seen or not os.path.isfile(path):  # a folder such as /var/spool/cron/crontabs is read above
            continue
        seen.add(real)
        found.append((path, crontab))
    return found


def _lines(root="/", notes=None):
    """Every line of the boot files: [{path, lineno, line, crontab}]. A file that is not text (binary, not UTF-8, a
    FIFO put there after the listing) is skipped, why appended to notes."""
    rows = []
    for path, crontab in boot_files(root):
        text, why = read_text(path, follow=True)  # root's own links (/etc/rc.local -> rc.d/rc.local)
        if text is None:
            if notes is not None:
                notes.append("skipped %s" % why)
            continue
        rows += [{"path": path, "lineno": n, "line": line, "crontab": crontab}
                 for n, line in enumerate(text.splitlines(), 1)]
    return rows


def _words(text):
    """The words of a shell line, quotes and the shell's separators taken away."""
    return re.split(r"[\s;&|()<>'\"`]+", text)


# Who runs a boot line: a system crontab's line names its user after @reboot; a user's crontab (crontabs/NAME,
# cron/NAME) runs as NAME; rc.local as root.
SYSTEM_CRONTABS = ("etc/crontab", "etc/cron.d")
# Words before a command that run it as it is (their options skipped), and the programs that run one as another user.
_PREFIXES = ("nohup", "setsid", "exec", "env", "nice", "time", "command")
_PREFIX_ARGS = {"nice": "n", "env": "uCS", "exec": "a"}  # their options that take a value
_SU_ARGS = "cgGsw"  # su's and runuser's options that take a value (-c the command; runuser -u USER runs argv)
_SUDO_ARGS = "ugpCDrtUT"  # sudo's (-u the user)
_LONG_ARGS = ("--command", "--shell", "--group", "--supp-group", "--whitelist-environment", "--user", "--prompt",
              "--chdir", "--chroot", "--close-from", "--role", "--type", "--other-user", "--command-timeout",
              "--unset")  # long options of these programs that take a value (also as --name=value)
_ASSIGN = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")


def _commands(text):
    """The simple commands of a shell line, each a list of words (quotes taken away, redirections' targets left out);
    None when the line does not parse (an open quote)."""
    lexer = shlex.shlex(text, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    lexer.commenters = ""
    commands, words, redirect = [], [], False
    try:
        for token in lexer:
            if redirect:
                redirect = False
            elif token and all(c in "();<>|&" for c in token):
                if "<" in token or ">" in token:
                    redirect = True  # 2>&1, > log: the next word is where, not an argument
                elif words:
                    commands.append(words)
                    words = []
            else:
                words.append(token)
    except ValueError:
        return None
    return commands + ([words] if words else [])


def _options(words, takes):
    """(options {letter or --long: value or True}, index of the first word after them) of short options clustered
    (-iu USER), of which the letters in `takes` take a value (the rest of the cluster, else the next word)."""
    found, i = {}, 0
    while i < len(words):
        w = words[i]
        if w == "--":
            return found, i + 1
        if w == "-":  # su's login shell
            found["-l"] = True
        elif w.startswith("--"):
            name, eq, value = w.partition("=")
            if not eq and name in _LONG_ARGS:
                i += 1
                value, eq = (words[i] if i < len(words) else ""), "="
            found[name] = value if eq else True
        elif w.startswith("-"):
            for j, c in enumerate(w[1:], 1):
                if c in takes:
                    rest = w[j + 1:]
                    if rest:
                        found[c] = rest
                    else:
                        i += 1
                        found[c] = words[i] if i < len(words) else ""
                    break
                found[c] = True
        else:
            return found, i
        i += 1
    return found, i


def _runs(words, script, user, as_user, depth=0):
    """Whether a simple command run as `as_user` runs `script` as `user`: the script is its command, or a shell's
    script (sh SCRIPT, not sh -c, whose next word is only $0), after words that run a command as it is (nohup, env,
    VAR=value...) and through su, runuser and sudo, which change the user (and hand su -c a command line)."""
    if depth > 8:
        return False
    i = 0
    while i < len(words):
        w = words[i]
        name = os.path.basename(w)
        if _ASSIGN.match(w):
            i += 1
        elif w == script:
            return as_user == user
        elif name in _PREFIXES:
            dummy, skip = _options(words[i + 1:], _PREFIX_ARGS.get(name, ""))
            i += 1 + skip
        elif name in SHELLS:
            opts, skip = _options(words[i + 1:], "oO")
            rest = words[i + 1 + skip:]
            if "c" in opts:  # the command is its first argument; the next is $0, which it does not run
                return bool(rest) and _runs_line(rest[0], script, user, as_user, depth + 1)
            return bool(rest) and "s" not in opts and rest[0] == script and as_user == user
        elif name in ("su", "runuser"):
            opts, skip = _options(words[i + 1:], _SU_ARGS + ("u" if name == "runuser" else ""))
            rest = words[i + 1 + skip:]
            if isinstance(opts.get("u") or opts.get("--user"), str):  # runuser -u USER [--] COMMAND...
                return _runs(rest, script, user, opts.get("u") or opts.get("--user"), depth + 1)
            target = rest[0] if rest and not rest[0].startswith("-") else "root"
            more, dummy = _options(rest[1:], _SU_ARGS)  # options after the user: su u -c CMD
            command = opts.get("c") or opts.get("--command") or more.get("c") or more.get("--command")
            return isinstance(command, str) and _runs_line(command, script, user, target, depth + 1)
        elif name == "sudo":
            opts, skip = _options(words[i + 1:], _SUDO_ARGS)
            target = opts.get("u") or opts.get("--user")
            return _runs(words[i + 1 + skip:], script, user, target if isinstance(target, str) else "root", depth + 1)
        else:
            return False
    return False


def _runs_line(text, script, user, as_user, depth=0):
    """Whether a shell command line run as `as_user` runs `script` as `user` (_runs(), for each simple command)."""
    return any(_runs(words, script, user, as_user, depth) for words in _commands(text) or [])


def _boot_command(row, root):
    """(the user a boot line runs as, its command) of a launcher-shaped line (see SYSTEM_CRONTABS); None for a
    system crontab's line without a user."""
    text = row["line"].strip()
    if not row["crontab"]:
        return "root", text
    command = text[len("@reboot"):].strip()
    where = os.path.relpath(row["path"], root)
    if where == SYSTEM_CRONTABS[0] or os.path.dirname(where) == SYSTEM_CRONTABS[1]:
        parts = command.split(None, 1)
        return (parts[0], parts[1]) if len(parts) == 2 else None
    return os.path.basename(row["path"]), command


def launchers(port, script=None, user=None, root="/", notes=None):
    """Lines that would start the server on `port` at boot: @reboot crontab lines and rc.local lines that

    - start SGLang on this port themselves (`sglang.launch_server`, `sglang serve`, the last --port as argparse reads
      it, SGLang's default without one), whoever runs them; or
    - run the wrapper's `script` as `user` (the wrapper's user, who owns the script; family.wrapper()): the script is
      the line's command, or a shell's script, directly or through nohup, env, su, runuser or sudo (_runs()).

    A line that only names the script (an argument, $0 of sh -c, a line run as another user: root's own job) is left
    alone, said in notes with where it is. [{path, lineno, line}]; files skipped are said in notes too."""
    found = []
    for row in _lines(root, notes):
        text = row["line"].strip()
        if not text or text.startswith("#") or (row["crontab"] and not text.startswith("@reboot")):
            continue
        if is_sglang_command(text) and port_of(_words(text)) == int(port):
            found.append({k: row[k] for k in ("path", "lineno", "line")})
            continue
        if not script or script not in _words(text):
            continue
        boot = _boot_command(row, root)
        if boot and user and _runs_line(boot[1], script, user, boot[0]):
            found.append({k: row[k] for k in ("path", "lineno", "line")})
        elif notes is not None:
            notes.append("left alone %s:%d: it names the wrapper's script %s but does not run it as %s"
                         % (row["path"], row["lineno"], script, user or "the wrapper's user"))
    return found


def disabled_launchers(service, root="/"):
    """Paths holding launcher lines the cutover to `service` disabled (a rollback enables them again)."""
    mark = "%s, %s " % (DISABLED, service)
    return sorted(set(row["path"] for row in _lines(root) if row["line"].startswith(mark)))
