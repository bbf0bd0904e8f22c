"""Checks on a test-bed host that several scenarios make. This folder is on the verifier's path (PYTHONPATH in
.config/molecule/config.yml): `from serving import ...`."""

UNIT = "sglang-30000.service"


def serves_from_its_unit(host, unit=UNIT, port=30000):
    """The unit is active and enabled, its main process is the one SGLang server on the port."""
    assert host.service(unit).is_running and host.service(unit).is_enabled
    main = host.check_output("systemctl show -p MainPID --value %s" % unit)
    cmdline = host.file("/proc/%s/cmdline" % main).content_string.replace("\0", " ")
    assert "sglang.launch_server" in cmdline or "bin/sglang serve" in cmdline, cmdline
    assert host.check_output("pgrep -c -f '%s.*--port %d'" % (SERVER, port)) == "1"


# pgrep's pattern for an SGLang server's main process: `python -m sglang.launch_server` or `sglang serve`
SERVER = "[s]glang([.]launch_server| serve)"
