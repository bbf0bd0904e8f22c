# -*- coding: utf-8 -*-
# Copyright: inferops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type


class ModuleDocFragment(object):
    # The port that identifies a server (inferops.sglang.server).
    DOCUMENTATION = r"""
options:
  port:
    description: The server's port; it identifies the server (one per port, many per host).
    type: int
    default: 30000
"""

    # The redact option of the modules outside process selection (inferops.sglang.server.redact);
    # the selection modules have it in inferops.sglang.selection.
    REDACT = r"""
options:
  redact:
    description:
      - More command-line flags whose value is masked in what the module returns and quotes (C(--api-key),
        C(--admin-api-key), C(--hf-token), C(--token), C(--password) always are, and so are variables named
        C(*_TOKEN), C(*_KEY), C(*_SECRET), C(*_PASSWORD)).
    type: list
    elements: str
    default: []
"""

    # The devices option of sglang_switch and sglang_adopt (inferops.sglang.server.devices); gpu_release says its own.
    DEVICES = r"""
options:
  devices:
    description: Globs of the device files whose holders are the server's GPUs' users.
    type: list
    elements: str
    default: [/dev/nvidia*, /dev/nvidia-caps/*]
"""
