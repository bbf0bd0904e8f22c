# -*- coding: utf-8 -*-
# Copyright: inferops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""sglang_patch: apply or revert patches to the installed sglang package."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import time

from ansible_collections.inferops.sglang.plugins.module_utils import _patch
from ansible_collections.inferops.sglang.plugins.module_utils._base import Base


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
        rc, out, err = self.module.run_command([p["python"], "-I", "-c", _DIST_SCRIPT])
        if rc != 0:
            self.fail("cannot read the sglang package's metadata with %s (never importing it): %s"
                      % (p["python"], (err or out).strip()[-2000:]))
        dist = json.loads(out)
        version, root = dist["version"], dist["root"]
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
                plan = _patch.plan(root, patch["diff"])
            except _patch.PatchError as e:
                self.fail("patch %s: %s" % (name, e))
            backup = os.path.join(p["backup_dir"], name)
            if p["state"] == "reverted":
                row.update(self.revert(root, backup, name))
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
                    _patch.write_atomic(root, plan.new, backup)
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
            drift = _patch.drift(root, _patch.record(dist["dist_info"]), explained)
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
            if not self.module.check_mode:
                os.makedirs(os.path.dirname(p["record_path"]), exist_ok=True)
                with open(p["record_path"] + ".tmp", "w") as f:
                    json.dump(rec, f, indent=2, sort_keys=True)
                os.chmod(p["record_path"] + ".tmp", 0o644)
                os.replace(p["record_path"] + ".tmp", p["record_path"])
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

    def revert(self, root, backup, name):
        """Put back the originals kept in backup (byte for byte)."""
        if not os.path.isdir(backup):
            return {"status": "nothing to revert (no backup of %s)" % name}
        contents, files = {}, {}
        for base, dummy, names in os.walk(backup):
            for n in names:
                rel = os.path.relpath(os.path.join(base, n), backup)
                with open(os.path.join(base, n), "rb") as f:
                    original = f.read()
                with open(os.path.join(root, rel), "rb") as f:
                    current = f.read()
                files[rel] = _patch.sha256_record(original)
                if current != original:
                    contents[rel] = original.decode("utf-8")
        if contents and not self.module.check_mode:
            _patch.write_atomic(root, contents)
        return {"status": "reverted" if contents else "already original", "files": files}
