# -*- coding: utf-8 -*-
# Copyright: inferops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

# Documented in systemd_unit_name.yml beside this file.

from ansible_collections.inferops.sglang.plugins.module_utils._specs import is_unit_name


def systemd_unit_name(name):
    """A service's name as the roles and the modules take it: no .service, an optional @instance (the modules'
    own check)."""
    return isinstance(name, str) and is_unit_name(name)


class TestModule(object):
    def tests(self):
        return {"systemd_unit_name": systemd_unit_name}
