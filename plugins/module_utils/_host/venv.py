# -*- coding: utf-8 -*-
# Copyright: inferops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""A venv and who controls it: its folder (above the interpreter's bin/), its owner, whether root may run its
interpreter (no other user can change the interpreter, the venv, its site-packages, their .pth files or the sglang
package), whether a path its interpreter printed lies inside it, a key naming it, and one file of its site-packages
put in place or removed (by its owner, through _owner.Owner.call)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import glob
import hashlib
import os
import stat
import tempfile

from ansible_collections.inferops.sglang.plugins.module_utils._host import owner as _owner

NOT_REGULAR = "(not a regular file)"


def folder(python):
    """The venv of an interpreter: the folder above its bin/ (as given: a venv's python is a link out of it)."""
    parent = os.path.dirname(os.path.abspath(python))
    return os.path.dirname(parent) if os.path.basename(parent) == "bin" else parent


def owner(python):
    """The _owner.Owner of the interpreter's venv (its folder's owner)."""
    return _owner.Owner.of(folder(python))


def worker(python, doing="run"):
    """(the _owner.Owner who works on the interpreter's venv, the venv's folder): the venv's owner; root only for a
    venv no other user can change. ValueError, saying why, otherwise: root would `doing` what another user can change."""
    venv = folder(python)
    try:
        who = owner(python)
        why = distrust(python) if who.is_root else None
    except OSError as e:
        raise ValueError("cannot look at the venv %s of %s: %s" % (venv, python, e))
    if why:
        raise ValueError("%s is root's venv, but %s: root would %s what another user can change. Make the venv root's "
                         "alone, or one user's; nothing was changed" % (venv, why, doing))
    return who, venv


def site_folders(venv):
    """The venv's site-packages folders (lib/pythonX.Y/site-packages; lib64 is a link to lib)."""
    return sorted(set(os.path.realpath(p) for p in glob.glob(os.path.join(venv, "lib*", "python*", "site-packages"))))


def distrust(python):
    """Why another user than root could change what root runs or imports with this interpreter (the interpreter, its
    venv's folder, its site-packages, their .pth files, the sglang package's files), or None."""
    venv = folder(python)
    for path in (python, venv):
        why = _owner.distrust(path)
        if why:
            return why
    for site in site_folders(venv):
        names = sorted(os.listdir(site))
        for path in [site] + [os.path.join(site, n) for n in names if n.endswith(".pth") or n == "sglang"]:
            why = _owner.distrust(path)
            if why:
                return why
        why = _tree(os.path.join(site, "sglang"))
        if why:
            return why
    return None


def _tree(top):
    """distrust() of everything under a trusted folder: each entry root's and not writable by others, each link's
    target trusted."""
    for base, dirs, files in os.walk(top):
        for path in [os.path.join(base, n) for n in dirs + files]:
            st = os.lstat(path)
            if stat.S_ISLNK(st.st_mode):
                why = _owner.distrust(path)
                if why:
                    return why
            elif st.st_uid != 0:
                return "%s is owned by %s" % (path, _owner.user_name(st.st_uid))
            elif st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
                return "%s can be written by others than root" % path
    return None


def inside(path, venv):
    """Whether path, every link resolved, lies inside the venv's folder (every link resolved)."""
    top = os.path.realpath(venv)
    return os.path.realpath(path).startswith(top.rstrip(os.sep) + os.sep)


def key(venv):
    """A name for the venv (its resolved folder's hash): what is kept of one venv is never applied to another."""
    return hashlib.sha256(os.path.realpath(venv).encode("utf-8")).hexdigest()[:16]


def site_file(venv, site, name, content, write):
    """One file of the venv's site-packages made to hold content (text; None: no such file), in the caller's name: the
    venv's owner calls it (_owner.Owner.call), so it follows only what the owner may. site, once its links are
    resolved, must lie inside the venv: else {"outside": the resolved folder}, nothing looked at. The file is read
    without following a link or blocking on a FIFO (anything but a regular file differs), and when it differs and
    `write`, replaced by a new file (a random name, 0644, renamed over it: never written through a link) or removed.
    Returns {"path", "before" (its text, None when absent), "changed"}."""
    folder = os.path.realpath(site)
    if not inside(folder, venv):
        return {"outside": folder}
    path = os.path.join(folder, name)
    try:
        regular = stat.S_ISREG(os.lstat(path).st_mode)
    except FileNotFoundError:
        regular, data = None, None
    if regular:
        data = _owner.read_regular(path)
    elif regular is not None:  # a link, a folder, a FIFO...: never read, always replaced
        data = NOT_REGULAR.encode("utf-8")
    want = None if content is None else content.encode("utf-8")
    changed = regular is False or data != want
    if changed and write:
        if want is None:
            os.unlink(path)
        else:
            fd, tmp = tempfile.mkstemp(dir=folder, prefix="." + name + ".")
            try:
                with os.fdopen(fd, "wb") as f:
                    f.write(want)
                os.chmod(tmp, 0o644)
                os.replace(tmp, path)
            except BaseException:
                if os.path.lexists(tmp):
                    os.unlink(tmp)
                raise
    return {"path": path, "before": None if data is None else data.decode("utf-8", "replace"), "changed": changed}
