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
        C(--admin-api-key), C(--hf-token), C(--token), C(--password) always are, and any prefix argparse takes for
        them such as C(--api-k); so are variables named C(*TOKEN), C(*_KEY), C(*_PASS), C(*_PWD), C(*PASSWORD*),
        C(*PASSWD*), C(*SECRET*), C(*CREDENTIAL*), C(*_AUTH*)).
    type: list
    elements: str
    default: []
"""

    # What sglang_switch and sglang_adopt take over from what was there (inferops.sglang.server.handover): the other
    # units that could serve the port, and the capture they keep.
    HANDOVER = r"""
options:
  existing_units:
    description:
      - What becomes of the other system units that could serve O(port) and are enabled or running (found as
        M(inferops.sglang.sglang_discover) finds them), which would fight the service for the port at every boot.
      - V(replace) backs each one's file and drop-ins up into the port's state folder (C(units/), listed in
        C(units.json)), disables it and stops it - through the switch when it runs the server -, once the
        preflight passed; a rollback (M(inferops.sglang.sglang_switch) with O(inferops.sglang.sglang_switch#module:target=capture))
        puts them back. V(refuse) fails the module, listing them, nothing touched.
    type: str
    choices: [replace, refuse]
    default: replace
  capture:
    description:
      - What M(inferops.sglang.sglang_discover) captured of the server, as JSON text (its
        RV(inferops.sglang.sglang_discover#module:stored), C(to_json)), kept as C(capture.json) in the port's state
        folder (mode 0600) once the preflight passed, when the server that runs is not yet the service's; a rollback
        starts it again. Secrets included (not logged).
    type: str
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
