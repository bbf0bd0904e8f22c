# -*- coding: utf-8 -*-
# Copyright: inferops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""nccl_env: environment variables for every interpreter of a venv (and every child it spawns), through one .pth file
in its site-packages. The venv's owner runs its interpreter and writes the file (root only in a venv no other user
can change)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import re

from ansible_collections.inferops.sglang.plugins.module_utils._host import venv as _venv
from ansible_collections.inferops.sglang.plugins.module_utils._host.command import CommandError
from ansible_collections.inferops.sglang.plugins.module_utils._host.redact import MASK, is_secret_name
from ansible_collections.inferops.sglang.plugins.module_utils._base import Base

TIMEOUT = 120
NAME = "inferops_nccl_env.pth"
_VARIABLE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")

# The file's text. Its first line is what the role's template wrote (Ansible's default ansible_managed), so that a
# file written before the module came is the same file, and changes nothing (a change restarts the server).
_HEADER = (
    "# Ansible managed\n"
    "# inferops.sglang.nccl_env: site runs the import line below whenever an interpreter of this venv starts,\n"
    "# so the server and every child it spawns see these variables. An explicit environment wins.\n"
)
_LINE = "import os; [os.environ.setdefault(k, v) for k, v in %s.items()]\n"

# Where the interpreter's site-packages are (run as the owner, -I: nothing of the environment).
_WHERE = 'import json, sys, sysconfig; print(json.dumps({"purelib": sysconfig.get_paths()["purelib"], "prefix": sys.prefix}))'

# What a bare interpreter (no -I, no -S: as the server starts) and a child it spawns see of the variables.
_VERIFY = """\
import json, sys, multiprocessing as mp
keys = json.loads(sys.argv[1])
code = "import os, json; print('CHILD ' + json.dumps({k: os.environ.get(k) for k in %r}), flush=True)" % (keys,)
print("PARENT " + json.dumps({k: __import__("os").environ.get(k) for k in keys}), flush=True)
p = mp.get_context("spawn").Process(target=exec, args=(code,))
p.start()
p.join()
sys.exit(p.exitcode)
"""


def text_of(variables):
    """The .pth file that sets variables (os.environ.setdefault), the values JSON-encoded: quotes, backslashes,
    newlines and $ arrive verbatim."""
    return _HEADER + _LINE % json.dumps(variables, sort_keys=True)


class NcclEnv(Base):
    """Writes (or removes) the .pth file in the venv's site-packages, then checks that a bare interpreter of the venv
    and a child it spawns see the variables (or none of them)."""

    def run(self):
        p = self.params
        variables = self.checked(p["variables"])
        present = p["state"] == "present"
        if not os.path.exists(p["venv"]):
            self.fail("venv %s does not exist: give the SGLang venv (or its python)" % p["venv"])
        python = os.path.join(p["venv"], "bin", "python") if os.path.isdir(p["venv"]) else p["venv"]
        owner, venv = self.owner_of(python)
        site = self.site(owner, python)
        content = text_of(variables) if present else None
        try:
            out = owner.call(_venv.site_file, venv, site, NAME, content, not self.module.check_mode)
        except OSError as e:
            self.fail("could not %s %s in %s as %s: %s"
                      % ("write" if present else "remove", NAME, site, owner, e.strerror or e))
        if "outside" in out:
            self.fail("%s is %s once its links are resolved: outside the venv %s, nothing was written"
                      % (site, out["outside"], venv))
        result = dict(changed=out["changed"], path=out["path"], names=sorted(variables) if present else [])
        if not self.module.check_mode:
            self.verify(owner, python, variables if present else dict.fromkeys(variables), result)
        if self.module._diff:
            result["diff"] = dict(before_header=out["path"], after_header=out["path"],
                                  before=self.shown(out["before"]), after=self.shown(content))
        self.module.exit_json(**result)

    def checked(self, variables):
        """variables, or the module fails (before anything is looked at) naming the bad names and the values that
        are not strings."""
        bad_names = [k for k in variables if not isinstance(k, str) or not _VARIABLE.match(k)]
        bad_values = [k for k, v in variables.items() if not isinstance(v, str)]
        if bad_names or bad_values:
            self.fail("variables must map environment variable names ([A-Za-z_][A-Za-z0-9_]*) to strings. Bad names: "
                      "%s. Not strings (quote them in YAML): %s. Nothing was written" % (bad_names, bad_values))
        return variables

    def owner_of(self, python):
        """(the _owner.Owner who does the work, the venv's folder): _venv.worker's; the module fails otherwise,
        before anything runs."""
        try:
            return _venv.worker(python, "run")
        except ValueError as e:
            self.fail(str(e))

    def site(self, owner, python):
        """The site-packages the venv's interpreter (run as its owner) names."""
        try:
            rc, out, err = owner.run([python, "-I", "-c", _WHERE], TIMEOUT)
        except CommandError as e:
            self.fail("cannot ask %s as %s where its site-packages are: %s" % (python, owner, e))
        if rc != 0:
            self.fail("cannot ask %s as %s where its site-packages are: %s" % (python, owner, (err or out).strip()[-2000:]))
        return json.loads(out)["purelib"]

    def verify(self, owner, python, want, result):
        """A bare interpreter of the venv (as its owner, a clean environment) and a child it spawns see want."""
        try:
            rc, out, err = owner.run([python, "-c", _VERIFY, json.dumps(sorted(want))], TIMEOUT)
        except CommandError as e:
            self.failed("the check that the venv's interpreters see the variables: %s" % e, result)
        seen = dict((line.split(" ", 1)[0], line.split(" ", 1)[1]) for line in out.splitlines()
                    if line.startswith(("PARENT ", "CHILD ")))
        if rc != 0 or set(seen) != {"PARENT", "CHILD"}:
            self.failed("the check that the venv's interpreters see the variables failed (%s as %s, rc %d): %s"
                        % (python, owner, rc, (err or out).strip()[-2000:]), result)
        parent, child = json.loads(seen["PARENT"]), json.loads(seen["CHILD"])
        if parent != want or child != want:
            self.failed("expected %s; the interpreter saw %s, its spawned child %s"
                        % (self.masked(want), self.masked(parent), self.masked(child)), result)

    @staticmethod
    def masked(variables):
        return dict((k, MASK if v is not None and is_secret_name(k) else v) for k, v in variables.items())

    def shown(self, text):
        """The file's text for the diff, the values of secret names masked in its import lines."""
        return "".join(self.masked_line(line) for line in (text or "").splitlines(True))

    def masked_line(self, line):
        head, tail = _LINE.split("%s")
        if line.startswith(head) and line.rstrip("\n").endswith(tail.rstrip("\n")):
            try:
                found = json.loads(line.rstrip("\n")[len(head):-len(tail.rstrip("\n"))])
            except ValueError:
                return line
            if isinstance(found, dict):
                return _LINE.rstrip("\n") % json.dumps(self.masked(found), sort_keys=True) + line[len(line.rstrip("\n")):]
        return line
