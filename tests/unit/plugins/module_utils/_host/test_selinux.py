"""The SELinux decision, with the enforce file and the security.selinux readings given as parameters: a real file
for /sys/fs/selinux/enforce, a table of contexts for the attribute, a table of tools for `which`."""
import os

import pytest

from ansible_collections.inferops.sglang.plugins.module_utils._host.selinux import check, enforcing, fix, label

from ..conftest import NOBODY, chown_tree, run_command

HOME = "unconfined_u:object_r:admin_home_t:s0"
BIN = "system_u:object_r:bin_t:s0"


@pytest.fixture
def venv(tmp_path):
    """A venv's bin: python a link to the system's interpreter, sglang a console script."""
    b = tmp_path / "venv" / "bin"
    b.mkdir(parents=True)
    system = tmp_path / "usr-bin-python3.9"
    system.write_text("")
    os.symlink(str(system), str(b / "python3"))
    (b / "sglang").write_text("#!%s\n" % (b / "python3"))
    return b


def enforce(tmp_path, value):
    p = tmp_path / "enforce"
    p.write_text(value)
    return str(p)


def xattrs(table):
    def getxattr(path, name):
        assert name == "security.selinux"
        if path not in table:
            raise OSError(61, "No data available")
        return table[path].encode() + b"\0"
    return getxattr


def tools(*names):
    return lambda name: "/usr/sbin/" + name if name in names else None


def test_enforcing_reads_the_flag_and_a_host_without_selinux_is_not(tmp_path):
    assert enforcing(enforce(tmp_path, "1\n")) is True
    assert enforcing(enforce(tmp_path, "0")) is False
    assert enforcing(str(tmp_path / "missing")) is False


def test_permissive_or_no_selinux_changes_nothing(tmp_path, venv):
    for flag in (enforce(tmp_path, "0"), str(tmp_path / "none")):
        got = check(str(venv / "sglang"), flag, xattrs({str(venv / "sglang"): HOME}), tools("semanage", "restorecon"))
        assert got["action"] == "none" and got["commands"] == [] and not got["enforcing"]


def test_a_system_binary_runs_as_it_is(tmp_path, venv):
    real = os.path.realpath(str(venv / "python3"))
    got = check(str(venv / "python3"), enforce(tmp_path, "1"), xattrs({real: BIN, str(venv / "python3"): HOME}),
                tools())
    assert got["action"] == "none" and got["path"] == real and got["type"] == "bin_t"  # the link's target counts


def test_a_console_script_under_root_is_labelled_when_the_tools_are_there(tmp_path, venv):
    script = str(venv / "sglang")
    got = check(script, enforce(tmp_path, "1"), xattrs({script: HOME}), tools("semanage", "restorecon"))
    assert got["action"] == "fix" and got["type"] == "admin_home_t"
    folder = str(venv)
    pattern = folder.replace(".", "\\.") + "(/.*)?"
    assert got["commands"] == [["/usr/sbin/semanage", "fcontext", "-a", "-t", "bin_t", pattern],
                               ["/usr/sbin/restorecon", "-R", folder]]


def test_without_semanage_the_cutover_stops_and_says_what_to_run(tmp_path, venv):
    script = str(venv / "sglang")
    for have in (tools("restorecon"), tools()):
        got = check(script, enforce(tmp_path, "1"), xattrs({script: HOME}), have)
        assert got["action"] == "stop"
        assert "semanage fcontext -a -t bin_t '%s(/.*)?'" % str(venv).replace(".", "\\.") in got["msg"]
        assert "restorecon -R %s" % venv in got["msg"] and "203/EXEC" in got["msg"]


def test_a_file_without_a_label_on_an_enforcing_host_is_fixed_too(tmp_path, venv):
    script = str(venv / "sglang")
    got = check(script, enforce(tmp_path, "1"), xattrs({}), tools("semanage", "restorecon"))
    assert got["action"] == "fix" and got["type"] is None


def test_the_fix_runs_the_commands_and_checks_the_type_again(tmp_path, venv):
    script = str(venv / "sglang")
    decision = dict(action="fix", path=script, commands=[["true"], ["true"]])
    assert fix(run_command, decision, xattrs({script: BIN})) is None
    assert "still has SELinux type admin_home_t" in fix(run_command, decision, xattrs({script: HOME}))
    why = fix(run_command, dict(decision, commands=[["false"], ["true"]]), xattrs({script: BIN}))
    assert why.startswith("false failed (rc 1)")


def test_label_reads_the_attribute_of_a_real_file(venv):
    assert label(str(venv / "sglang"), xattrs({str(venv / "sglang"): BIN})) == BIN
    # this machine's own file system: a context where SELinux labels files, else none
    got = label(str(venv / "sglang"))
    assert got is None or got.count(":") >= 3


@pytest.fixture
def owners_venv(public_dir):
    """A venv's bin owned by nobody: python a link to the system's interpreter."""
    b = public_dir / "venv" / "bin"
    b.mkdir(parents=True)
    os.symlink("/usr/bin/python3", str(b / "python3"))
    chown_tree(public_dir / "venv", NOBODY.pw_uid, NOBODY.pw_gid)
    return b


@pytest.mark.skipif(os.getuid() != 0, reason="needs root: the venv is nobody's")
def test_a_folder_reached_through_the_owners_links_is_never_relabelled_the_commands_are_printed(tmp_path, owners_venv):
    """The owner points venv/bin/python3 at a system binary (/usr/bin/python3 stands in for /usr/sbin/sshd): the
    folder the link leads to is not relabelled for good; the cutover stops and prints the commands instead."""
    real = os.path.realpath(str(owners_venv / "python3"))
    got = check(str(owners_venv / "python3"), enforce(tmp_path, "1"), xattrs({real: HOME}), tools("semanage", "restorecon"))
    folder = os.path.dirname(real)
    assert got["action"] == "stop" and got["commands"][1] == ["/usr/sbin/restorecon", "-R", folder]
    assert ("the folder is not relabelled by the cutover because another user than root can change what %s is (%s "
            "is owned by nobody)" % (owners_venv / "python3", owners_venv.parent)) in got["msg"]
    assert "Run: semanage fcontext -a -t bin_t '%s(/.*)?'; restorecon -R %s" % (folder, folder) in got["msg"]
