# -*- coding: utf-8 -*-
# Copyright: inferops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""sglang_patch: apply or revert patches to the installed sglang package. The venv's owner reads and writes its
files (root only in a venv no other user can change); root keeps the backups, keyed by venv, in its own folder."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import re
import time

from ansible_collections.inferops.sglang.plugins.module_utils._host import files as _files, venv as _venv
from ansible_collections.inferops.sglang.plugins.module_utils._server import patch as _patch
from ansible_collections.inferops.sglang.plugins.module_utils._base import Base
from ansible_collections.inferops.sglang.plugins.module_utils._host.command import CommandError

TIMEOUT = 120
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*\Z")


_DIST_SCRIPT = (
    "import importlib.metadata as m, json\n"
    "d = m.distribution('sglang')\n"
    "rec = [f for f in (d.files or []) if f.name == 'RECORD' and f.parent.name.endswith('.dist-info')]\n"
    "print(json.dumps({'version': d.version, 'root': str(d.locate_file('')),"
    " 'dist_info': str(rec[0].locate().parent) if rec else None}))\n"
)


class SglangPatch(Base):
    """Applies (or reverts) a list of patches to the installed sglang package, and records the outcome."""

    STATE = {"applied": "applied", "already applied": "applied", "skipped": "skipped",
             "reverted": "original", "already original": "original"}

    def run(self):
        p = self.params
        bad = [x["name"] for x in p["patches"] if not _NAME.match(x["name"])]
        if bad:
            self.fail("a patch's name is letters, digits, '.', '_' and '-' (not starting with a dot or a dash), "
                      "also its backup folder's: not %s" % ", ".join(repr(x) for x in bad))
        owner, venv = self.owner_of(p["python"])
        dist = self.dist(owner, p["python"], venv)
        version, root = dist["version"], dist["root"]

        def read(root, rels):  # the package's files, read by the venv's owner
            return owner.call(_patch.read_files, root, rels)

        previous = {}
        if p["record_path"] and os.path.exists(p["record_path"]):
            with open(p["record_path"]) as f:
                previous = dict((x["name"], x) for x in json.load(f).get("patches", []))
        results, events, explained, changed, diffs = [], [], {}, False, []
        for patch in p["patches"]:
            name = patch["name"]
            row = {"name": name, "versions": patch["versions"]}
            if version not in patch["versions"]:
                if patch.get("on_other_version", "fail") == "skip":
                    row["status"] = "skipped (sglang %s not in %s)" % (version, patch["versions"])
                    results.append(row)
                    continue
                self.fail("patch %s is for sglang %s; the installed version is %s. Check the patch against this "
                          "version and add it to its versions, or set on_other_version: skip"
                          % (name, ", ".join(patch["versions"]), version), version=version)
            try:
                plan = _patch.plan(root, patch["diff"], read)
            except (_patch.PatchError, OSError, UnicodeDecodeError) as e:
                self.fail("patch %s: %s" % (name, e))
            backup = os.path.join(p["backup_dir"], _venv.key(venv), name)  # a venv's originals, never another's
            if p["state"] == "reverted":
                row.update(self.revert(owner, root, backup, name))
                row["backup"] = backup
                changed = changed or row["status"] == "reverted"
                results.append(row)
                continue
            if plan.state == "rejected":
                self.fail("patch %s neither applies to sglang %s nor is already in; nothing was changed. Rejected "
                          "hunks:\n%s" % (name, version, "\n".join("%s:\n%s" % (f, "\n".join(h)) for f, h in plan.rejected.items())),
                          rejected=plan.rejected, version=version)
            if plan.state == "apply":
                if previous.get(name, {}).get("state") == "applied":
                    events.append({"patch": name, "reason": "its changes were gone (sglang reinstalled?); re-applied"})
                if not self.module.check_mode:
                    self.write(owner, root, plan.new, dict((rel, plan.old[rel]) for rel in plan.new), backup)
                changed = True
                diffs.append(patch["diff"])
                row["status"] = "applied"
                row["files"] = dict((rel, _patch.sha256_record(text.encode("utf-8"))) for rel, text in plan.new.items())
            else:
                row["status"] = "already applied"
                row["files"] = dict((rel, _patch.sha256_record(text.encode("utf-8"))) for rel, text in plan.old.items())
            row["backup"] = backup
            explained.update(row["files"])
            results.append(row)
        drift = []
        if dist["dist_info"] and p["state"] == "applied":
            try:
                drift = owner.call(_patch.drift_of, root, dist["dist_info"], explained)
            except OSError as e:
                self.fail("cannot read the sglang package's RECORD in %s as %s: %s" % (dist["dist_info"], owner, e))
            if self.module.check_mode:  # what would be written is not on disk yet
                drift = [d for d in drift if d["path"] not in explained]
        files_of = dict((r["name"], r.get("files", {})) for r in results)
        for e in events:  # a reinstall wiped a patch: drift too, file by file
            drift += [{"path": rel, "reason": "patch %s was gone (sglang reinstalled?); re-applied" % e["patch"]}
                      for rel in sorted(files_of.get(e["patch"], {}))]
        # The record holds the state (stable from run to run) and the history of events, not this run's news.
        prev_rec = self.load(p["record_path"])
        stamped = [dict(e, time=time.time()) for e in events]
        rec = {"package": "sglang", "version": version, "root": root, "drift": drift,
               "history": (prev_rec.get("history") or []) + stamped,
               "patches": [{"name": r["name"], "versions": r["versions"], "files": r.get("files", {}),
                            "state": self.STATE.get(r["status"].split(" (")[0], r["status"])} for r in results],
               "time": time.time()}
        if p["record_path"] and dict(rec, time=None) != dict(prev_rec, time=None):
            changed = True  # the record is part of what the module manages
            self.write_files([_files.File(p["record_path"], json.dumps(rec, indent=2, sort_keys=True), 0o644)])
        result = dict(changed=changed, version=version, root=root, patches=results, drift=drift, events=events,
                      record_path=p["record_path"])
        if self.module._diff and diffs:
            result["diff"] = {"prepared": "\n".join(diffs)}
        self.module.exit_json(**result)

    @staticmethod
    def load(path):
        if not path or not os.path.exists(path):
            return {}
        with open(path) as f:
            return json.load(f)

    def owner_of(self, python):
        """(the _owner.Owner who does the work, the venv's folder): _venv.worker's; the module fails otherwise,
        before anything runs."""
        try:
            return _venv.worker(python, "run and patch")
        except ValueError as e:
            self.fail(str(e))

    def dist(self, owner, python, venv):
        """What the interpreter (run as the owner, never importing sglang) says of the installed sglang; the module
        fails when it says a folder outside the venv (every link resolved)."""
        try:
            rc, out, err = owner.run([python, "-I", "-c", _DIST_SCRIPT], TIMEOUT)
        except CommandError as e:
            self.fail("cannot read the sglang package's metadata with %s as %s: %s" % (python, owner, e))
        if rc != 0:
            self.fail("cannot read the sglang package's metadata with %s as %s (never importing it): %s"
                      % (python, owner, (err or out).strip()[-2000:]))
        dist = json.loads(out)
        for key in ("root", "dist_info"):
            if dist[key] and not _venv.inside(dist[key], venv):
                self.fail("%s says the sglang package's %s is %s, outside the venv %s once its links are resolved: "
                          "nothing was changed" % (python, key, dist[key], venv))
        return dist

    def write(self, owner, root, new, originals, backup):
        """The originals kept (root's backup folder), then the new texts written by the owner."""
        try:
            _patch.keep(backup, originals)
            owner.call(_patch.write_atomic, root, new)
        except (_patch.PatchError, OSError) as e:
            self.fail("could not write the patched files under %s as %s: %s" % (root, owner, e))

    def revert(self, owner, root, backup, name):
        """Put back the originals kept in backup (byte for byte), written by the owner."""
        if not os.path.isdir(backup):
            return {"status": "nothing to revert (no backup of %s for this venv)" % name}
        try:
            originals = _patch.kept(backup)
            current = owner.call(_patch.read_files, root, sorted(originals))
        except (_patch.PatchError, OSError) as e:
            self.fail("patch %s: cannot compare the backup with %s: %s" % (name, root, e))
        contents, files = {}, {}
        for rel, original in originals.items():
            files[rel] = _patch.sha256_record(original)
            if current.get(rel) is None or current[rel].encode("utf-8") != original:
                contents[rel] = original.decode("utf-8")
        if contents and not self.module.check_mode:
            try:
                owner.call(_patch.write_atomic, root, contents)
            except (_patch.PatchError, OSError) as e:
                self.fail("could not put back the originals under %s as %s: %s" % (root, owner, e))
        return {"status": "reverted" if contents else "already original", "files": files}
