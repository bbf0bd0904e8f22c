# -*- coding: utf-8 -*-
# Copyright: inferops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

# Documented in as_user.yml beside this file.

from ansible.errors import AnsibleFilterError
from ansible_collections.inferops.sglang.plugins.module_utils._host.owner import PATH


def _id(value, what):
    if isinstance(value, bool) or not isinstance(value, int) and not (isinstance(value, str) and value.isdigit()):
        raise AnsibleFilterError("as_user wants %s as a number, not %r" % (what, value))
    return int(value)


def as_user(uid, gid, home="/"):
    """The argv prefix that runs a command as uid and gid for good (setpriv: no groups, no way back), in a clean
    environment (the system's PATH, the user's HOME, LANG=C.UTF-8; nothing of root's)."""
    uid, gid = _id(uid, "the uid"), _id(gid, "the gid")
    if not isinstance(home, str) or not home.startswith("/") or "\n" in home:
        raise AnsibleFilterError("as_user wants the home folder as an absolute path, not %r" % (home,))
    return ["setpriv", "--reuid=%d" % uid, "--regid=%d" % gid, "--clear-groups", "--",
            "env", "-i", "PATH=" + PATH, "HOME=" + home, "LANG=C.UTF-8"]


class FilterModule(object):
    def filters(self):
        return {"as_user": as_user}
