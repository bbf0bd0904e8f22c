"""nccl_env's manager on real venvs: the .pth file written, kept, removed byte for byte; what a bare interpreter and its
spawned child really see; check and diff mode; a venv of nobody's asked and written as nobody; a site-packages linked
out of the venv, a link at the file's name and a root venv nobody can change."""
import glob
import json
import os
import subprocess
import sys

import pytest

from ansible_collections.inferops.sglang.plugins.module_utils._manager_nccl_env import NcclEnv, NAME

from .conftest import NOBODY, Exited, Failed, FakeModule, chown_tree

TRICKY = "it's \"quoted\", back\\slash, $HOME ${X} %h;\nsecond line\ttab \u00fcn\u00efcode"
VARS = {"NCCL_PROTO": "LL", "NCCL_IB_DISABLE": "1", "INFEROPS_TRICKY": TRICKY}
# What the role's template (roles/nccl_env/templates/nccl_env.pth.j2, Ansible's default ansible_managed) wrote for
# VARS: the module writes the same bytes, so a venv set up before it changes nothing (no restart of the server).
TEMPLATE_TEXT = (
    "# Ansible managed\n"
    "# inferops.sglang.nccl_env: site runs the import line below whenever an interpreter of this venv starts,\n"
    "# so the server and every child it spawns see these variables. An explicit environment wins.\n"
    'import os; [os.environ.setdefault(k, v) for k, v in {"INFEROPS_TRICKY": "it\'s \\"quoted\\", back\\\\slash, '
    '$HOME ${X} %h;\\nsecond line\\ttab \\u00fcn\\u00efcode", "NCCL_IB_DISABLE": "1", "NCCL_PROTO": "LL"}.items()]\n'
)


class Module(FakeModule):
    defaults = dict(state="present", variables={})


def make_venv(folder, python=sys.executable):
    subprocess.run([python, "-m", "venv", "--without-pip", str(folder / "venv")], check=True)
    site = glob.glob(str(folder / "venv" / "lib" / "python*" / "site-packages"))[0]
    return {"venv": str(folder / "venv"), "python": str(folder / "venv" / "bin" / "python"), "site": site,
            "pth": os.path.join(site, NAME)}


@pytest.fixture
def venv(tmp_path):
    return make_venv(tmp_path)


def result_of(module):
    with pytest.raises(Exited) as e:
        NcclEnv(module).run()
    return e.value.args[0]


def failure(module):
    with pytest.raises(Failed) as e:
        NcclEnv(module).run()
    return e.value.args[0]


def seen(python, keys, env=None):
    """What a bare interpreter of the venv sees of keys (env -i: nothing of ours)."""
    code = "import os, json; print(json.dumps({k: os.environ.get(k) for k in %r}))" % (keys,)
    argv = ["env", "-i"] + ["%s=%s" % kv for kv in (env or {}).items()] + [python, "-c", code]
    return json.loads(subprocess.check_output(argv, cwd="/"))


def site_files(venv):
    return sorted(os.listdir(venv["site"]))


def test_written_kept_and_removed_byte_for_byte(venv):
    before = site_files(venv)
    r = result_of(Module(venv=venv["venv"], variables=VARS))
    assert r == {"changed": True, "path": venv["pth"], "names": sorted(VARS)}
    with open(venv["pth"]) as f:
        assert f.read() == TEMPLATE_TEXT
    assert oct(os.stat(venv["pth"]).st_mode & 0o777) == "0o644"
    assert seen(venv["python"], sorted(VARS)) == VARS
    assert seen(venv["python"], ["NCCL_PROTO"], {"NCCL_PROTO": "Simple"}) == {"NCCL_PROTO": "Simple"}

    assert result_of(Module(venv=venv["python"], variables=VARS)) == dict(r, changed=False), "the python names it too"

    gone = result_of(Module(venv=venv["venv"], variables=VARS, state="absent"))
    assert gone == {"changed": True, "path": venv["pth"], "names": []}
    assert site_files(venv) == before and seen(venv["python"], ["NCCL_PROTO"]) == {"NCCL_PROTO": None}
    assert not result_of(Module(venv=venv["venv"], variables=VARS, state="absent"))["changed"]


def test_check_mode_says_what_would_change_and_writes_nothing(venv):
    before = site_files(venv)
    r = result_of(Module(check_mode=True, venv=venv["venv"], variables=VARS))
    assert r["changed"] and r["names"] == sorted(VARS) and site_files(venv) == before
    result_of(Module(venv=venv["venv"], variables=VARS))
    assert not result_of(Module(check_mode=True, venv=venv["venv"], variables=VARS))["changed"]
    assert result_of(Module(check_mode=True, venv=venv["venv"], variables=dict(VARS, NCCL_PROTO="Simple")))["changed"]
    assert result_of(Module(check_mode=True, venv=venv["venv"], variables=VARS, state="absent"))["changed"]
    with open(venv["pth"]) as f:
        assert f.read() == TEMPLATE_TEXT


def test_the_diff_shows_the_file_with_secret_values_masked(venv):
    secret = dict(VARS, HF_TOKEN="hf_s3cret")
    r = result_of(Module(diff=True, venv=venv["venv"], variables=secret))
    assert r["diff"]["before"] == "" and r["diff"]["before_header"] == venv["pth"]
    assert '"HF_TOKEN": "********"' in r["diff"]["after"] and "hf_s3cret" not in json.dumps(r)
    assert '"NCCL_PROTO": "LL"' in r["diff"]["after"]
    assert seen(venv["python"], ["HF_TOKEN"]) == {"HF_TOKEN": "hf_s3cret"}
    gone = result_of(Module(diff=True, venv=venv["venv"], variables=secret, state="absent"))
    assert '"HF_TOKEN": "********"' in gone["diff"]["before"] and gone["diff"]["after"] == ""
    assert "hf_s3cret" not in json.dumps(gone)


@pytest.mark.parametrize("variables, bad", [
    ({"NCCL_IB_DISABLE": 1}, "Bad names: []. Not strings (quote them in YAML): ['NCCL_IB_DISABLE']"),
    ({"BAD-NAME": "x"}, "Bad names: ['BAD-NAME']. Not strings (quote them in YAML): []"),
    ({"1BAD": "x", "NCCL_DEBUG": True}, "Bad names: ['1BAD']. Not strings (quote them in YAML): ['NCCL_DEBUG']"),
    ({"A\nB": "x"}, "Bad names: ['A\\nB']"),
])
def test_bad_input_fails_naming_it_and_writes_nothing(venv, variables, bad):
    before = site_files(venv)
    out = failure(Module(venv=venv["venv"], variables=variables))
    assert out["msg"].startswith("variables must map environment variable names ([A-Za-z_][A-Za-z0-9_]*) to strings. ")
    assert bad in out["msg"] and site_files(venv) == before


def test_a_missing_venv_fails_saying_what_to_give(tmp_path):
    out = failure(Module(venv=str(tmp_path / "nowhere")))
    assert out["msg"] == "venv %s does not exist: give the SGLang venv (or its python)" % (tmp_path / "nowhere")


def test_the_check_fails_when_the_interpreter_does_not_see_the_values(venv):
    """A .pth of the venv read before ours sets NCCL_PROTO itself: the bare interpreter sees its value, not ours."""
    with open(os.path.join(venv["site"], "aa_first.pth"), "w") as f:
        f.write("import os; os.environ['NCCL_PROTO'] = 'Simple'\n")
    out = failure(Module(venv=venv["venv"], variables=VARS))
    assert out["msg"].startswith("expected {"), out["msg"]
    assert "the interpreter saw {'INFEROPS_TRICKY': %r, 'NCCL_IB_DISABLE': '1', 'NCCL_PROTO': 'Simple'}" % TRICKY \
        in out["msg"]
    assert out["changed"] and out["path"] == venv["pth"]


def test_a_link_at_the_files_name_is_replaced_never_written_through(venv, tmp_path):
    target = tmp_path / "elsewhere"
    target.write_text("keep\n")
    os.symlink(str(target), venv["pth"])
    r = result_of(Module(venv=venv["venv"], variables=VARS))
    assert r["changed"] and not os.path.islink(venv["pth"]) and target.read_text() == "keep\n"
    os.unlink(venv["pth"])
    os.symlink(str(target), venv["pth"])
    assert result_of(Module(venv=venv["venv"], variables=VARS, state="absent"))["changed"]
    assert not os.path.lexists(venv["pth"]) and target.read_text() == "keep\n"


@pytest.fixture
def nobodys(public_dir):
    """A venv of the system's python, nobody's, with a zz_evil.pth that appends the uid it runs as to `uids`."""
    v = make_venv(public_dir, "/usr/bin/python3")
    v["uids"] = public_dir / "uids"
    v["uids"].touch()
    v["uids"].chmod(0o666)
    with open(os.path.join(v["site"], "zz_evil.pth"), "w") as f:
        f.write("import os; open(%r, 'a').write('%%d\\n' %% os.getuid())\n" % str(v["uids"]))
    chown_tree(public_dir / "venv", NOBODY.pw_uid, NOBODY.pw_gid)
    return v


@pytest.mark.skipif(os.getuid() != 0, reason="needs root: the venv is nobody's")
def test_the_owners_venv_is_asked_checked_and_written_as_its_owner(nobodys):
    r = result_of(Module(venv=nobodys["venv"], variables={"NCCL_DEBUG": "INFO"}))
    assert r["changed"] and os.stat(nobodys["pth"]).st_uid == NOBODY.pw_uid
    uids = [int(x) for x in nobodys["uids"].read_text().split()]
    assert len(uids) >= 3 and set(uids) == {NOBODY.pw_uid}, "the query, the interpreter and its child: all nobody"
    assert result_of(Module(venv=nobodys["venv"], variables={"NCCL_DEBUG": "INFO"}, state="absent"))["changed"]
    assert not os.path.lexists(nobodys["pth"])


@pytest.mark.skipif(os.getuid() != 0, reason="needs root: the venv is nobody's")
def test_a_site_packages_linked_out_of_the_venv_is_refused(nobodys, public_dir):
    outside = public_dir / "outside"
    outside.mkdir()
    os.chown(str(outside), NOBODY.pw_uid, NOBODY.pw_gid)
    os.rename(os.path.join(nobodys["site"], "zz_evil.pth"), str(public_dir / "zz_evil.pth"))
    os.rmdir(nobodys["site"])
    os.symlink(str(outside), nobodys["site"])
    os.lchown(nobodys["site"], NOBODY.pw_uid, NOBODY.pw_gid)
    for check_mode in (True, False):
        out = failure(Module(check_mode=check_mode, venv=nobodys["venv"], variables={"NCCL_DEBUG": "INFO"}))
        assert out["msg"] == "%s is %s once its links are resolved: outside the venv %s, nothing was written" % (
            nobodys["site"], outside, nobodys["venv"])
    assert os.listdir(str(outside)) == []


@pytest.mark.skipif(os.getuid() != 0, reason="needs root: a file of the root venv is nobody's")
def test_a_root_venv_another_user_can_change_is_refused_before_its_interpreter_runs(public_dir):
    v = make_venv(public_dir, "/usr/bin/python3")
    uids = public_dir / "uids"
    uids.touch()
    uids.chmod(0o666)
    evil = os.path.join(v["site"], "zz_evil.pth")
    with open(evil, "w") as f:
        f.write("import os; open(%r, 'a').write('%%d\\n' %% os.getuid())\n" % str(uids))
    os.chown(evil, NOBODY.pw_uid, NOBODY.pw_gid)
    out = failure(Module(venv=v["venv"], variables={"NCCL_DEBUG": "INFO"}))
    assert out["msg"] == ("%s is root's venv, but %s is owned by nobody: root would run what another user can change. "
                          "Make the venv root's alone, or one user's; nothing was changed" % (v["venv"], evil))
    assert uids.read_text() == "" and not os.path.lexists(v["pth"])
