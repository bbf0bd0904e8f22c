# -*- coding: utf-8 -*-
# Copyright: inferops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Boot launchers: @reboot crontab lines and rc.local lines that would start a second copy of a server at boot."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import re

from ansible_collections.inferops.sglang.plugins.module_utils._server.family import is_sglang_command
from ansible_collections.inferops.sglang.plugins.module_utils._host.owner import read_text

# Where each layout keeps them; a host has some of these, and what it has is read (never guessed from its name):
# rc.local is /etc/rc.local (Debian; a link to the next one on RHEL) or /etc/rc.d/rc.local (RHEL family); root's
# crontab is /var/spool/cron/crontabs/root (Debian) or /var/spool/cron/root (RHEL family).
RC_LOCAL = ("etc/rc.d/rc.local", "etc/rc.local")
BOOT_FILES = ("etc/crontab",) + RC_LOCAL
BOOT_DIRS = ("etc/cron.d", "var/spool/cron/crontabs", "var/spool/cron")
DISABLED = "# disabled by inferops.sglang cutover"


def _port_of(text):
    words = text.replace("=", " ").split()
    for i, w in enumerate(words[:-1]):
        if w == "--port":
            return words[i + 1]
    return None


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


def launchers(port, scripts=(), root="/", notes=None):
    """Lines that would start a server on `port` at boot: @reboot crontab lines and rc.local lines that run an SGLang
    server (`sglang.launch_server`, `sglang serve`; or one of `scripts`, a wrapper's: a word of the line equal to its
    path), on this port (a line without --port: 30000). [{path, lineno, line}]; files skipped are said in notes."""
    found = []
    for row in _lines(root, notes):
        text = row["line"].strip()
        if not text or text.startswith("#") or (row["crontab"] and not text.startswith("@reboot")):
            continue
        server = is_sglang_command(text) and (_port_of(text) or "30000") == str(port)
        if server or set(s for s in scripts if s) & set(_words(text)):
            found.append({k: row[k] for k in ("path", "lineno", "line")})
    return found


def disabled_launchers(service, root="/"):
    """Paths holding launcher lines the cutover to `service` disabled (a rollback enables them again)."""
    mark = "%s, %s " % (DISABLED, service)
    return sorted(set(row["path"] for row in _lines(root) if row["line"].startswith(mark)))
