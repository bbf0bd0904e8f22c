#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: inferops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: nccl_env
short_description: Environment variables for every interpreter of a venv and every child it spawns, through a .pth file
version_added: 0.3.0
description:
  - Writes one C(.pth) file, C(inferops_nccl_env.pth), into the venv's site-packages, whose one code line sets the
    variables with C(os.environ.setdefault) (a variable set explicitly in the process's environment wins) whenever
    an interpreter of the venv starts; every child inherits them, and spawned children run the line again
    themselves. With O(state=absent), removes exactly that file.
  - A C(sitecustomize.py) in the venv does not do this on Debian and Ubuntu system Pythons, which import their own
    C(/usr/lib/python3.X/sitecustomize.py) first (docs/nccl_env.md).
  - The venv's interpreter (which runs the venv's C(.pth) files, C(-I) too) runs as the venv's owner (the owner of
    the folder above its C(bin/)), with the owner's uid, gid and groups and a clean environment; the file is written
    and removed by that owner too, never through a link, and only in a site-packages that lies inside the venv once
    its links are resolved. A root-owned venv that another user can change (the interpreter, the venv, its
    site-packages, their C(.pth) files, the sglang package) is refused.
  - Then checks that a bare interpreter of the venv (as its owner, in a clean environment) and a child it spawns
    see exactly the variables (none of them once removed); the module fails when they do not.
  - Used by the P(inferops.sglang.nccl_env#role) role.
author: inferops.sglang maintainers (@inferops)
extends_documentation_fragment:
  - inferops.sglang.attributes
options:
  venv:
    description: The venv's folder, or the path of its python.
    type: path
    required: true
  variables:
    description:
      - The variables to set, names (V([A-Za-z_][A-Za-z0-9_]*)) to string values (quote numbers in YAML).
      - With O(state=absent), the names the check expects to see unset.
    type: dict
    default: {}
  state:
    description: V(present) writes the file; V(absent) removes exactly it.
    type: str
    choices: [present, absent]
    default: present
attributes:
  check_mode:
    support: full
    details: Asks the interpreter where its site-packages are and compares the file; writes nothing and skips the check.
  diff_mode:
    support: full
    details: The file's text before and after, the values of secret names (C(*_TOKEN), C(*_KEY), C(*PASSWORD*)...) masked.
  platform:
    platforms: posix
    support: full
"""

EXAMPLES = r"""
- name: NCCL variables for a PCIe-only host
  inferops.sglang.nccl_env:
    venv: /opt/sglang/venv
    variables:
      NCCL_PROTO: LL
      NCCL_P2P_LEVEL: PHB
      NCCL_IB_DISABLE: "1"

- name: Take them away again
  inferops.sglang.nccl_env:
    venv: /opt/sglang/venv
    variables:
      NCCL_PROTO: LL
      NCCL_P2P_LEVEL: PHB
      NCCL_IB_DISABLE: "1"
    state: absent
"""

RETURN = r"""
path:
  description: The C(.pth) file (in the site-packages the venv's interpreter names, its links resolved).
  returned: success
  type: str
  sample: /opt/sglang/venv/lib/python3.11/site-packages/inferops_nccl_env.pth
names:
  description: The variables the file sets, sorted; none once removed.
  returned: success
  type: list
  elements: str
  sample: [NCCL_IB_DISABLE, NCCL_P2P_LEVEL, NCCL_PROTO]
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.inferops.sglang.plugins.module_utils._manager_nccl_env import NcclEnv


def main():
    module = AnsibleModule(
        argument_spec=dict(
            venv=dict(type="path", required=True),
            variables=dict(type="dict", default={}),
            state=dict(type="str", choices=["present", "absent"], default="present"),
        ),
        supports_check_mode=True,
    )
    NcclEnv(module).run()


if __name__ == "__main__":
    main()
