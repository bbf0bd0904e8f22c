"""A unit's text before it is installed: optional dependencies added where the host has them."""
from ansible_collections.inferops.sglang.plugins.module_utils._unit import names, with_wants

UNIT = "# managed\n[Unit]\nDescription=x\nWants=network-online.target\nAfter=network-online.target\n\n[Service]\nAfter=no\n"


def test_the_units_join_the_first_wants_and_after_of_the_unit_section_only():
    got = with_wants(UNIT, ["nvidia-persistenced.service"])
    assert got.splitlines() == ["# managed", "[Unit]", "Description=x",
                                "Wants=network-online.target nvidia-persistenced.service",
                                "After=network-online.target nvidia-persistenced.service", "", "[Service]", "After=no"]


def test_nothing_to_add_leaves_the_text_as_it_is():
    assert with_wants(UNIT, []) == UNIT


def test_a_unit_section_without_wants_or_after_gets_both_lines():
    got = with_wants("[Unit]\nDescription=x\n\n[Service]\nExecStart=/bin/true\n", ["a.service", "b.service"])
    assert got.splitlines()[:4] == ["[Unit]", "Wants=a.service b.service", "After=a.service b.service", "Description=x"]


def run(argv):
    import subprocess
    p = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True, check=False)
    return p.returncode, p.stdout, p.stderr


def test_systemd_analyze_accepts_a_good_unit_and_names_what_is_wrong_with_a_bad_one():
    from ansible_collections.inferops.sglang.plugins.module_utils._unit import verify
    good = "[Unit]\nDescription=x\n[Service]\nType=exec\nExecStart=/bin/sleep 1\n[Install]\nWantedBy=multi-user.target\n"
    assert verify(run, good, "x.service") is None
    why = verify(run, good.replace("/bin/sleep", "/opt/missing/bin/python"), "x.service")
    assert "/opt/missing/bin/python" in why and "x.service" in why and "inferops-unit-" not in why


def test_the_names_an_environment_file_sets():
    text = "# managed\nPATH=/opt/v/bin:/usr/bin\nINFEROPS_API_KEY=\"a=b\"\n  # a comment=x\nHF_HOME=/data\n\n"
    assert names(text) == ["HF_HOME", "INFEROPS_API_KEY", "PATH"]
    assert names("") == []
