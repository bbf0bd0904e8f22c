# -*- coding: utf-8 -*-
# Copyright: inferops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""External commands (nvidia-smi, systemctl, journalctl) always run under coreutils' timeout.

`run` is a callable taking an argv list and returning (rc, stdout, stderr): AnsibleModule.run_command
in the modules, run_command below where there is no AnsibleModule (the detached switch).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import math
import subprocess

TIMED_OUT = 124  # timeout's exit status when the command ran out of time
# After -k, timeout sends SIGKILL to its process group, itself included: the caller sees timeout killed
# (rc -9 from subprocess, 137 from a shell), never timeout's own answer.
KILLED = (128 + 9, -9)


class CommandError(Exception):
    pass


def timed(run, argv, seconds):
    """Run argv, killed after `seconds` (SIGTERM, then SIGKILL 2 s later). Returns (rc, out, err)."""
    rc, out, err = run(["timeout", "-k", "2", str(int(math.ceil(seconds))), ] + list(argv))
    if rc == TIMED_OUT or rc in KILLED:
        raise CommandError("%s did not answer within %d s" % (argv[0], int(math.ceil(seconds))))
    return rc, out, err


def run_command(argv):
    """(rc, stdout, stderr) of argv: the stand-in for AnsibleModule.run_command."""
    try:
        # the detached switch has no AnsibleModule, hence no run_command
        p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,  # pylint: disable=ansible-bad-function
                             universal_newlines=True)
    except OSError as e:
        return 127, "", str(e)
    out, err = p.communicate()
    return p.returncode, out, err
