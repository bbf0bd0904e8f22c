# -*- coding: utf-8 -*-
# Copyright: inferops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""A strict unified-diff applier (standard library only; minimal hosts have no `patch`), and the
installed package's RECORD, to tell our patches from drift.

Strict: every context and removed line must match exactly (no fuzz); a hunk is looked for at its
stated line first, then anywhere in the file, and must be found exactly once there. Atomic: all files
of a patch are written (temp file + rename) or none.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import base64
import csv
import errno
import hashlib
import os
import re
import stat
import tempfile

from ansible_collections.inferops.sglang.plugins.module_utils._host.owner import read_regular

_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")


class PatchError(Exception):
    pass


class Hunk:
    def __init__(self, old_start, lines):
        self.old_start = old_start
        self.lines = lines  # (tag, text) with tag in ' ', '-', '+'

    @property
    def old(self):
        return [t for tag, t in self.lines if tag in " -"]

    @property
    def new(self):
        return [t for tag, t in self.lines if tag in " +"]

    def text(self):
        return "".join(tag + t for tag, t in self.lines)


class FilePatch:
    def __init__(self, path):
        self.path = path
        self.hunks = []


def _strip(path):
    path = path.split("\t")[0].strip()
    if path.startswith(("a/", "b/")):
        path = path[2:]
    return path


def parse(diff):
    """[FilePatch] from unified diff text; paths lose their a/ b/ prefix (like patch -p1)."""
    if diff and not diff.endswith("\n"):
        diff += "\n"  # a diff read by a tool that strips the trailing newline
    files, cur, lines, i = [], None, diff.splitlines(True), 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("--- ") and i + 1 < len(lines) and lines[i + 1].startswith("+++ "):
            new_path = _strip(lines[i + 1][4:])
            if new_path == "/dev/null" or _strip(line[4:]) == "/dev/null":
                raise PatchError("creating or deleting files is not supported (%s)" % new_path)
            cur = FilePatch(new_path)
            files.append(cur)
            i += 2
            continue
        m = _HUNK.match(line)
        if m:
            if cur is None:
                raise PatchError("hunk before any file header at line %d" % (i + 1))
            old_len = int(m.group(2)) if m.group(2) is not None else 1
            new_len = int(m.group(4)) if m.group(4) is not None else 1
            body, i = [], i + 1
            o = n = 0
            while i < len(lines) and (o < old_len or n < new_len):
                text = lines[i]
                if text.startswith("\\"):
                    i += 1
                    continue
                if text[:1] in (" ", "-", "+"):
                    tag, rest = text[0], text[1:]
                elif text in ("\n", "\r\n"):  # an empty context line whose space was trimmed
                    tag, rest = " ", text
                else:
                    break
                body.append((tag, rest))
                o += tag in " -"
                n += tag in " +"
                i += 1
            if o != old_len or n != new_len:
                raise PatchError("hunk at line %d of the diff is truncated" % (i + 1))
            cur.hunks.append(Hunk(int(m.group(1)), body))
            continue
        i += 1
    if not files or not any(f.hunks for f in files):
        raise PatchError("no hunks found: give a unified diff (diff -u, git diff)")
    return files


def _find(content, want, hint):
    """Index where the lines `want` stand in content: at hint if they do, else the only place they do."""
    n = len(want)
    if 0 <= hint <= len(content) - n and content[hint:hint + n] == want:
        return hint
    hits = [i for i in range(len(content) - n + 1) if content[i:i + n] == want]
    return hits[0] if len(hits) == 1 else None


def apply_hunks(content, hunks, reverse=False):
    """New list of lines, or (None, [rejected hunk texts])."""
    out, rejected, shift = list(content), [], 0
    for h in hunks:
        old, new = (h.new, h.old) if reverse else (h.old, h.new)
        at = _find(out, old, max(0, h.old_start - 1 + shift))
        if at is None:
            rejected.append(h.text())
            continue
        out[at:at + len(old)] = new
        shift += len(new) - len(old)
    return (None, rejected) if rejected else (out, [])


def sha256_record(data):
    """The hash as RECORD writes it: sha256=<urlsafe b64, no padding>."""
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def under(root, rel):
    """root/rel for a path of the package: refused when it holds . or .., or when a folder below root is a link (a
    venv's owner could make one lead anywhere)."""
    parts = [x for x in rel.split("/") if x]
    if not parts or any(x in (".", "..") for x in parts) or rel.startswith("/"):
        raise PatchError("%r is not a path inside the package" % rel)
    path = root
    for x in parts[:-1]:
        path = os.path.join(path, x)
        if os.path.islink(path):
            raise PatchError("%s is a symbolic link: its files are not patched" % path)
    return os.path.join(root, *parts)


def read_files(root, rels):
    """{rel: text, or None when missing} of files of the package, never through a link (under(), then an open that
    refuses a link, a FIFO, anything but a regular file). Run by the venv's owner."""
    out = {}
    for rel in rels:
        try:
            out[rel] = read_regular(under(root, rel)).decode("utf-8")
        except OSError as e:
            if e.errno != errno.ENOENT:
                raise
            out[rel] = None
    return out


class Plan:
    """What applying a patch to the tree under `root` means: per file, state and new content."""

    def __init__(self, root, files):
        self.root = root
        self.files = files
        self.state = None      # "apply" | "applied" | "rejected"
        self.new = {}          # path -> new text
        self.old = {}          # path -> current text
        self.rejected = {}     # path -> [hunk texts] that neither apply nor are in


def plan(root, diff, read=read_files):
    """The Plan of a diff on the package under root; read(root, rels) reads its files (read_files, or the same run
    by the venv's owner)."""
    files = parse(diff)
    p = Plan(root, files)
    texts = read(root, [fp.path for fp in files])
    forward, reverse_ok = {}, True
    for fp in files:
        if texts.get(fp.path) is None:
            p.rejected[fp.path] = ["file not found: %s" % os.path.join(root, fp.path)]
            reverse_ok = False
            continue
        content = texts[fp.path].splitlines(True)
        p.old[fp.path] = "".join(content)
        new, rej = apply_hunks(content, fp.hunks)
        if new is not None:
            forward[fp.path] = "".join(new)
        back, rej_back = apply_hunks(content, fp.hunks, reverse=True)
        if back is None:
            reverse_ok = False
            if new is None:
                p.rejected[fp.path] = rej
    if p.rejected:
        p.state = "rejected"
    elif len(forward) == len(files):
        p.state = "apply"
        p.new = forward
    elif reverse_ok:
        p.state = "applied"
    else:
        p.state = "rejected"
        for fp in files:
            if fp.path not in forward:
                p.rejected.setdefault(fp.path, [h.text() for h in fp.hunks])
    return p


def write_atomic(root, contents):
    """Write {relpath: text} all or none (each a new file renamed over the old, its mode kept), never through a link;
    run by the venv's owner."""
    temps, done = {}, []
    originals = dict((rel, read_regular(under(root, rel))) for rel in contents)
    try:
        for rel, text in contents.items():
            path = under(root, rel)
            fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".inferops-")
            with os.fdopen(fd, "wb") as f:
                f.write(text.encode("utf-8"))
            os.chmod(tmp, stat.S_IMODE(os.lstat(path).st_mode))
            temps[rel] = tmp
        for rel, tmp in temps.items():
            os.replace(tmp, under(root, rel))
            done.append(rel)
    except Exception:
        for rel in done:  # put back what was already replaced
            with open(under(root, rel), "wb") as f:
                f.write(originals[rel])
        for tmp in temps.values():
            if os.path.exists(tmp):
                os.unlink(tmp)
        raise


def keep(backup_dir, originals):
    """The originals ({relpath: text}, as the venv's owner read them) kept in backup_dir (root's): each file once, the
    first original kept; created new (O_EXCL, never through a link), 0600."""
    for rel, text in originals.items():
        path = under(backup_dir, rel)
        if os.path.lexists(path):
            continue
        folder = os.path.dirname(path)
        if not os.path.isdir(folder):
            os.makedirs(folder, mode=0o700)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(text.encode("utf-8"))


def kept(backup_dir):
    """{relpath: bytes} of the originals kept in backup_dir."""
    out = {}
    for base, dummy, names in os.walk(backup_dir):
        for n in names:
            path = os.path.join(base, n)
            out[os.path.relpath(path, backup_dir)] = read_regular(path)
    return out


def drift_of(root, dist_info, explained=None):
    """drift() against the RECORD of dist_info."""
    return drift(root, record(dist_info), explained)


def record(dist_info):
    """{relpath: 'sha256=...'} from a dist-info RECORD: the package's files under site-packages (entry-point
    scripts elsewhere, ../../bin/..., are not its source and are left out)."""
    out = {}
    with open(os.path.join(dist_info, "RECORD"), newline="") as f:
        for row in csv.reader(f):
            if len(row) >= 2 and row[1].startswith("sha256=") and not row[0].startswith(("../", "/")):
                out[row[0]] = row[1]
    return out


def drift(root, recorded, explained=None):
    """Files whose content differs from RECORD, less those our patches explain ({relpath: hash}); run by the venv's
    owner."""
    explained = explained or {}
    changed = []
    for rel, want in sorted(recorded.items()):
        try:
            got = sha256_record(read_regular(under(root, rel)))
        except (OSError, PatchError):
            changed.append({"path": rel, "reason": "missing"})
            continue
        if got != want and explained.get(rel) != got:
            changed.append({"path": rel, "reason": "differs from RECORD"})
    return changed
