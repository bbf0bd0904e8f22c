#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: inferops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: sglang_patch
short_description: Apply local fixes to the installed SGLang package, strictly, atomically, with backups
version_added: 0.1.0
description:
  - Reads the installed sglang's version and location from the venv's interpreter through package metadata
    (never C(import sglang), which may not import without a GPU). The interpreter runs as the venv's owner (the
    owner of the folder above its C(bin/)), with a clean environment; the venv's files are read and written by that
    owner too, never through a link. A root-owned venv that another user can change (the interpreter, the venv,
    its site-packages, their C(.pth) files, the sglang package) is refused, and so is a package location outside
    the venv once its links are resolved.
  - Applies each unified diff strictly (context must match exactly, no fuzz), all files of a patch or none
    (temp file and rename), keeping the original of every file it changes in O(backup_dir).
  - A patch already in (its reverse applies) is not applied again. A patch that neither applies nor is in fails,
    showing the rejected hunks, with the files left as they were.
  - Compares every file with the package's dist-info RECORD and reports the files that differ and are not
    explained by the patches (drift); a patch recorded as applied whose changes are gone (a
    C(pip install --force-reinstall)) is applied again and reported under RV(events).
  - Writes a JSON record of the outcome to O(record_path).
  - Used by the P(inferops.sglang.sglang_patches#role) role.
author: inferops.sglang maintainers (@inferops)
extends_documentation_fragment:
  - inferops.sglang.attributes
options:
  python:
    description: The SGLang venv's python.
    type: path
    required: true
  patches:
    description: The patches, in order.
    type: list
    elements: dict
    required: true
    suboptions:
      name:
        description: A name (letters, digits, C(.), C(_), C(-)), also the backup folder's.
        type: str
        required: true
      diff:
        description: The unified diff (paths relative to site-packages, with or without C(a/) C(b/) prefixes).
        type: str
        required: true
      versions:
        description: The sglang versions the patch was checked against.
        type: list
        elements: str
        required: true
      on_other_version:
        description: On another version, V(fail) or V(skip) the patch.
        type: str
        choices: [fail, skip]
        default: fail
  state:
    description: V(applied), or V(reverted) to put back the originals kept in O(backup_dir).
    type: str
    choices: [applied, reverted]
    default: applied
  backup_dir:
    description: Where the originals are kept (root's), one folder per venv (a key of its resolved path), then one
      per patch; the originals of one venv are never put into another.
    type: path
    required: true
  record_path:
    description: The JSON record to write (the cutover's report and the status play read it).
    type: path
attributes:
  check_mode:
    support: full
    details: Plans every patch and reports what would be applied; writes nothing.
  diff_mode:
    support: full
    details: The patches that are (or would be) applied.
  platform:
    platforms: posix
    support: full
"""

EXAMPLES = r"""
- name: Apply the local fixes
  inferops.sglang.sglang_patch:
    python: /opt/sglang/venv/bin/python
    backup_dir: /var/lib/inferops/sglang-patches/backup
    record_path: /var/lib/inferops/sglang-patches/record.json
    patches:
      - name: eagle-spec-disable-batch-threshold
        diff: "{{ lookup('ansible.builtin.file', 'patches/eagle-spec-disable-batch-threshold.patch') }}"
        versions: ['0.5.23']
"""

RETURN = r"""
version:
  description: The installed sglang version.
  returned: always
  type: str
  sample: 0.5.23
root:
  description: The site-packages the package lives in.
  returned: always
  type: str
  sample: /opt/sglang/venv/lib/python3.12/site-packages
patches:
  description: Per patch, its status (applied, already applied, skipped, reverted, already original) and file hashes.
  returned: always
  type: list
  elements: dict
  sample: [{name: eagle-spec-disable-batch-threshold, status: applied, files: {sglang/srt/speculative/eagle_worker_v2.py: "sha256=..."}}]
drift:
  description: Files that differ from the package's RECORD and are not explained by the patches.
  returned: always
  type: list
  elements: dict
  sample: [{path: sglang/srt/server_args.py, reason: differs from RECORD}]
events:
  description: Patches found gone and applied again.
  returned: always
  type: list
  elements: dict
  sample: [{patch: eagle-spec-disable-batch-threshold, reason: "its changes were gone (sglang reinstalled?); re-applied"}]
record_path:
  description: Where the record was written.
  returned: always
  type: str
  sample: /var/lib/inferops/sglang-patches/record.json
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.inferops.sglang.plugins.module_utils._manager_sglang_patch import SglangPatch


def main():
    module = AnsibleModule(
        argument_spec=dict(
            python=dict(type="path", required=True),
            patches=dict(type="list", elements="dict", required=True, options=dict(
                name=dict(type="str", required=True),
                diff=dict(type="str", required=True),
                versions=dict(type="list", elements="str", required=True),
                on_other_version=dict(type="str", choices=["fail", "skip"], default="fail"),
            )),
            state=dict(type="str", choices=["applied", "reverted"], default="applied"),
            backup_dir=dict(type="path", required=True),
            record_path=dict(type="path"),
        ),
        supports_check_mode=True,
    )
    SglangPatch(module).run()


if __name__ == "__main__":
    main()
