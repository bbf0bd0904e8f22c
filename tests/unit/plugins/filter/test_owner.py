"""as_user: the prefix a role's command task runs a user's interpreter with, run for real as nobody."""
import json
import os
import subprocess

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.inferops.sglang.plugins.filter.owner import as_user


@pytest.mark.skipif(os.getuid() != 0, reason="needs root: it runs as nobody")
def test_the_command_runs_as_the_user_with_no_groups_and_a_clean_environment(monkeypatch):
    monkeypatch.setenv("INFEROPS_ROOT_SECRET", "s3cret")
    code = "import json, os; print(json.dumps([os.getresuid(), os.getresgid(), os.getgroups(), dict(os.environ)]))"
    out = subprocess.check_output(as_user(65534, 65534, "/nonexistent") + ["/usr/bin/python3", "-I", "-c", code],
                                  universal_newlines=True)
    res, gid, groups, env = json.loads(out)
    assert res == [65534] * 3 and gid == [65534] * 3 and groups == []
    assert {k: v for k, v in env.items() if k != "LC_CTYPE"} == {
        "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME": "/nonexistent",
        "LANG": "C.UTF-8"}


@pytest.mark.parametrize("args", [("x", 1), (1, None), (True, 1), (1, 1, "relative"), (1, 1, "/a\nb")])
def test_bad_ids_or_home_are_refused(args):
    with pytest.raises(AnsibleFilterError, match="as_user wants"):
        as_user(*args)
