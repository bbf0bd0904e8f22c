# -*- coding: utf-8 -*-
# Copyright: inferops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import textwrap


class ModuleDocFragment(object):
    # A unit's files, put in place as sglang_unit does (module_utils/_specs.py UNIT_FILES_SPEC): sglang_unit's
    # options (inferops.sglang.unit_files), and sglang_switch's install suboptions (inferops.sglang.unit_files.suboptions,
    # below).
    DOCUMENTATION = r"""
options:
  unit:
    description: The unit file's text.
    type: str
    required: true
  unit_dir:
    description: Where the unit file goes.
    type: path
    default: /etc/systemd/system
  environment:
    description: The environment file's text (it holds secrets; never shown, also not in diff mode).
    type: str
    default: ""
  environment_path:
    description: Where the environment file goes (mode 0600, its folder 0700). Not written when not given.
    type: path
  gate:
    description: The readiness gate's text (the script the unit's C(ExecStartPost) runs).
    type: str
    default: ""
  gate_path:
    description: Where the readiness gate goes (mode 0644). Not written when not given.
    type: path
  sweep:
    description: The shared-memory sweep's text (the script the unit's C(ExecStartPre) runs).
    type: str
    default: ""
  sweep_path:
    description: Where the shared-memory sweep goes (mode 0644). Not written when not given.
    type: path
  wants:
    description:
      - Units the service wants and starts after where this host has them, added to the unit's first C(Wants=) and
        C(After=); a unit the host does not have is left out.
    type: list
    elements: str
    default: []
"""


def suboptions(option, *fragments):
    """The options of fragments (their texts) as the suboptions of option, whose description and type the module
    gives: a fragment adds top-level options only, so a group that is also an option's suboptions is nested here,
    from the same text."""
    options = "".join(text.split("\noptions:\n", 1)[1] for text in fragments)
    return "\noptions:\n  %s:\n    suboptions:\n%s" % (option, textwrap.indent(options, "    "))


# Made after the class: ansible-test's yamllint reads the literal texts of a fragment's class, and this one is made.
ModuleDocFragment.SUBOPTIONS = suboptions("install", ModuleDocFragment.DOCUMENTATION)
