# -*- coding: utf-8 -*-
# Copyright: inferops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The option groups several modules take, each written once, and the checks of the values more than one takes.

A group's documentation is the doc fragment named beside it (plugins/doc_fragments/); ansible-test's validate-modules
checks that the two agree in every module that uses them."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.inferops.sglang.plugins.module_utils._host.nvidia import DEFAULT_DEVICES
from ansible_collections.inferops.sglang.plugins.module_utils._host.redact import DEFAULT_PORT
from ansible_collections.inferops.sglang.plugins.module_utils._host.selection import DEFAULT_MAX_TARGETS
# A service's name (without .service, an optional @instance): the rule lives with the unit's files, in _host/unit.py;
# sglang_switch, sglang_adopt and the filters take it from here as they take the specs.
from ansible_collections.inferops.sglang.plugins.module_utils._host.unit import (  # noqa: F401 pylint: disable=unused-import
    UNIT_NAME, check_unit_name, is_unit_name)

# Flags whose value is masked in what a module returns (inferops.sglang.server.redact, or inferops.sglang.selection).
REDACT_SPEC = dict(redact=dict(type="list", elements="str", default=[], no_log=False))

# Which processes: process_kill, process_count and gpu_release (inferops.sglang.selection).
SELECTION_SPEC = dict(
    pid=dict(type="list", elements="raw"),
    pattern=dict(type="str"),
    user=dict(type="str"),
    exclude=dict(type="list", elements="str", default=[]),
    max_targets=dict(type="int", default=DEFAULT_MAX_TARGETS),
    protect=dict(type="list", elements="str", default=[]),
    unprotect=dict(type="list", elements="str", default=[]),
    **REDACT_SPEC
)

# How they are stopped: process_kill and gpu_release (inferops.sglang.stop).
STOP_SPEC = dict(
    signal=dict(type="str", default="TERM"),
    escalate=dict(type="str", default="KILL"),
    grace=dict(type="float", default=30.0),
)

# The port that identifies a server: sglang_discover, sglang_switch, sglang_adopt (inferops.sglang.server).
PORT_SPEC = dict(port=dict(type="int", default=DEFAULT_PORT))

# The device files whose holders are GPU users: gpu_release, sglang_switch, sglang_adopt (each says what it does
# with them; sglang_switch and sglang_adopt in inferops.sglang.server.devices).
DEVICES_SPEC = dict(devices=dict(type="list", elements="str", default=list(DEFAULT_DEVICES)))

# The server on a port and the service that takes it over: sglang_switch and sglang_adopt, checked by
# Base.port_and_unit (each module says what its unit, state_dir and drain are for).
TAKEOVER_SPEC = dict(
    PORT_SPEC,
    unit=dict(type="str", required=True),
    state_dir=dict(type="path", default="/var/lib/inferops/cutover"),
    drain=dict(type="float", default=120.0),
    **DEVICES_SPEC
)

# What sglang_switch and sglang_adopt take over from what was there: the other units that could serve the port, and
# the capture they keep (inferops.sglang.server.handover). The capture is JSON text: a dict option's every value
# (its pid, its numbers) would be masked in all output as a secret.
HANDOVER_SPEC = dict(
    existing_units=dict(type="str", choices=["replace", "refuse"], default="replace"),
    capture=dict(type="str", no_log=True),
)

# A unit's files as _unit.install puts them in place: sglang_unit's options, with the service's name and what to do
# with it, and sglang_switch's install suboptions (inferops.sglang.unit_files).
UNIT_FILES_SPEC = dict(
    unit=dict(type="str", required=True),
    unit_dir=dict(type="path", default="/etc/systemd/system"),
    environment=dict(type="str", default="", no_log=True),
    environment_path=dict(type="path"),
    gate=dict(type="str", default=""),
    gate_path=dict(type="path"),
    sweep=dict(type="str", default=""),
    sweep_path=dict(type="path"),
    wants=dict(type="list", elements="str", default=[]),
)

# How a server is waited for until it serves, besides where it is: model_wait's options and sglang_switch's wait
# suboptions (inferops.sglang.wait); each gives its url (model_wait a default, sglang_switch none).
WAIT_SPEC = dict(
    api_key=dict(type="str", no_log=True),
    generate=dict(type="bool", default=False),
    timeout=dict(type="float", default=900.0),
)


def check_port(port, fail):
    """port, or fail(message) when no server can listen on it."""
    if not 0 < port < 65536:
        fail("port must be 1-65535, not %d" % port)
    return port
