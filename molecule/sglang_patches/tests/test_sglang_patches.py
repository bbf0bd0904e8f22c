"""On the host: the patched file, its backup against RECORD, the record, a reinstall, drift and revert."""
import hashlib
import json
import os
import subprocess

SITE = "/opt/sglang-real/venv/lib/python3.11/site-packages"
TARGET = "sglang/srt/speculative/eagle_worker_v2.py"
STATE = "/var/lib/inferops/sglang-patches"
FIX = "self.spec_disable_batch_threshold = None"


def record_hash(host, rel):
    rec = host.check_output("cat %s/sglang-0.5.23.dist-info/RECORD" % SITE)
    return [line.split(",")[1] for line in rec.splitlines() if line.startswith(rel + ",")][0]


HASH = ("import base64, hashlib, sys; "
        "print(base64.urlsafe_b64encode(hashlib.sha256(open(sys.argv[1], 'rb').read()).digest()).rstrip(b'=').decode())")


def file_hash(host, path):
    return "sha256=" + host.check_output('python3 -c "%s" %s' % (HASH, path))


def rerun(extra):
    play = [{"hosts": "all", "gather_facts": False, "roles": [{"role": "inferops.sglang.sglang_patches", "vars": dict({
        "sglang_patches_venv": "/opt/sglang-real/venv",
        "sglang_patches_list": [{"name": "eagle-spec-disable-batch-threshold", "versions": ["0.5.23"],
                                 "file": os.path.join(os.environ["INFEROPS_ROOT"],
                                                      "tests/fixtures/patches/eagle-spec-disable-batch-threshold.patch")}],
    }, **extra)}]}]
    path = os.path.join(os.environ.get("MOLECULE_EPHEMERAL_DIRECTORY", "/tmp"), "patches_rerun.yml")
    with open(path, "w") as f:
        json.dump(play, f)
    subprocess.run(["ansible-playbook", "-i", os.environ["MOLECULE_INVENTORY_FILE"], path], check=True, stdout=subprocess.DEVNULL)


def record(host):
    return json.loads(host.file(STATE + "/record.json").content_string)


def test_patched_and_the_backup_is_the_original(host):
    """The original is kept under the venv's own key (its resolved path's hash), then the patch's name."""
    assert FIX in host.file("%s/%s" % (SITE, TARGET)).content_string
    key = hashlib.sha256(host.check_output("readlink -f /opt/sglang-real/venv").encode()).hexdigest()[:16]
    backup = "%s/backup/%s/eagle-spec-disable-batch-threshold/%s" % (STATE, key, TARGET)
    assert file_hash(host, backup) == record_hash(host, TARGET)


def test_record(host):
    f = host.file(STATE + "/record.json")
    assert f.mode == 0o644 and f.user == "root"
    rec = record(host)
    assert rec["version"] == "0.5.23" and rec["drift"] == []
    assert rec["patches"][0]["state"] == "applied"
    assert rec["patches"][0]["files"][TARGET] == file_hash(host, "%s/%s" % (SITE, TARGET))


def test_reinstall_wipes_the_patch_and_a_rerun_puts_it_back_saying_so(host):
    host.check_output(
        "/opt/sglang-real/venv/bin/pip install --quiet --no-compile --no-deps --no-index --upgrade --force-reinstall --target %s "
        "--python-version 3.12 --implementation cp --platform manylinux_2_34_x86_64 --only-binary=:all: "
        "/opt/wheels-real/sglang-0.5.23-*.whl" % SITE)
    assert FIX not in host.file("%s/%s" % (SITE, TARGET)).content_string
    rerun({})
    assert FIX in host.file("%s/%s" % (SITE, TARGET)).content_string
    rec = record(host)
    assert [e["patch"] for e in rec["history"]] == ["eagle-spec-disable-batch-threshold"]
    assert rec["drift"] == [{"path": TARGET, "reason": "patch eagle-spec-disable-batch-threshold was gone "
                                                       "(sglang reinstalled?); re-applied"}]


def test_a_hand_edit_is_reported_as_drift(host):
    host.check_output("echo '# edited by hand' >> %s/sglang/srt/server_args.py" % SITE)
    rerun({})
    assert record(host)["drift"] == [{"path": "sglang/srt/server_args.py", "reason": "differs from RECORD"}]


def test_revert_puts_the_original_back_byte_for_byte(host):
    rerun({"sglang_patches_state": "reverted"})
    assert file_hash(host, "%s/%s" % (SITE, TARGET)) == record_hash(host, TARGET)
    assert record(host)["patches"][0]["state"] == "original"
