# -*- coding: utf-8 -*-
# Copyright: inferops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""SELinux and the unit's executable: on an enforcing host systemd runs a service's executable only when its file
type allows it (a venv under /root or /home is admin_home_t or user_home_t: the start fails with 203/EXEC). Reads
/sys/fs/selinux/enforce and the security.selinux attribute; no SELinux bindings."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import shutil

from ansible_collections.inferops.sglang.plugins.module_utils._host.command import timed
from ansible_collections.inferops.sglang.plugins.module_utils._host.owner import distrust

ENFORCE = "/sys/fs/selinux/enforce"
# Types systemd (init_t) runs a service's executable from: the system's binaries and libraries.
RUNNABLE = ("bin_t", "usr_t", "lib_t", "shell_exec_t")
FIX_TYPE = "bin_t"
TIMEOUT = 120


class Decisions:
    """What check() decides for an executable (its action)."""

    NONE = "none"  # not enforcing, or a type systemd runs
    FIX = "fix"    # its folder to be labelled FIX_TYPE (the commands)
    STOP = "stop"  # a problem: the message says what to run


def enforcing(path=ENFORCE):
    """Whether SELinux is enforcing (False when the host has none, or it is permissive)."""
    try:
        with open(path) as f:
            return f.read().strip() == "1"
    except (IOError, OSError):
        return False


def label(path, getxattr=getattr(os, "getxattr", None)):
    """The file's SELinux context (`ls -Z`), None when it has none."""
    try:
        return getxattr(path, "security.selinux").rstrip(b"\0").decode("ascii", "replace")
    except (OSError, TypeError):
        return None


def _regex(folder):
    """semanage fcontext's pattern for the folder and everything in it."""
    return "".join("\\" + c if c in ".^$*+?()[]{}|\\" else c for c in folder) + "(/.*)?"


def check(executable, enforce=ENFORCE, getxattr=getattr(os, "getxattr", None), which=shutil.which):
    """What the cutover does about the executable's SELinux type: {action: none|fix|stop, type, path, commands, msg}.
    `none`: SELinux is not enforcing, or the type is one systemd runs; `fix`: semanage and restorecon are here, no
    other user than root can change what the executable is (its links, their folders), and `commands` label the
    executable's folder bin_t; `stop`: otherwise, and msg says what to run."""
    out = dict(action=Decisions.NONE, enforcing=enforcing(enforce), path=None, type=None, commands=[], msg=None)
    if not out["enforcing"]:
        return out
    real = os.path.realpath(executable)  # a venv's python is a link: the file run is its target
    context = label(real, getxattr)
    kind = context.split(":")[2] if context and context.count(":") >= 2 else None
    out.update(path=real, type=kind)
    if kind in RUNNABLE:
        return out
    folder = os.path.dirname(real)
    semanage, restorecon = which("semanage"), which("restorecon")
    commands = [[semanage or "semanage", "fcontext", "-a", "-t", FIX_TYPE, _regex(folder)],
                [restorecon or "restorecon", "-R", folder]]
    out["commands"] = commands
    # the owner of a link on the way could point it at any folder (/usr/sbin) between this look and the relabel
    untrusted = distrust(executable)
    if semanage and restorecon and not untrusted:
        out["action"] = Decisions.FIX
        out["msg"] = "%s has SELinux type %s, which systemd does not run: labelling %s %s" % (real, kind, folder, FIX_TYPE)
        return out
    out["action"] = Decisions.STOP
    run = "; ".join(" ".join("'%s'" % w if "(" in w else w for w in c) for c in
                    [["semanage"] + commands[0][1:], ["restorecon"] + commands[1][1:]])
    out["msg"] = ("SELinux is enforcing and %s has type %s, which systemd does not run (the unit would fail with "
                  "203/EXEC), and %s. Run: %s" % (
                      real, kind, ("the folder is not relabelled by the cutover because another user than root can "
                                   "change what %s is (%s): check the folder, then relabel it yourself" % (
                                       executable, untrusted)) if untrusted
                      else "semanage or restorecon is missing (policycoreutils-python-utils)", run))
    return out


def fix(run, decision, getxattr=getattr(os, "getxattr", None)):
    """Run a `fix` decision's commands; None when the executable's type is one systemd runs now, else why not."""
    for argv in decision["commands"]:
        rc, out, err = timed(run, argv, TIMEOUT)
        if rc != 0:
            return "%s failed (rc %d): %s" % (" ".join(argv), rc, (err or out).strip()[-500:])
    context = label(decision["path"], getxattr) or ""
    kind = context.split(":")[2] if context.count(":") >= 2 else None
    if kind not in RUNNABLE:
        return "%s still has SELinux type %s after %s" % (decision["path"], kind, " and ".join(
            c[0] for c in decision["commands"]))
    return None
