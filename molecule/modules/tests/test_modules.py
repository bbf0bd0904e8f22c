"""After the converge: the host's real state, read from /proc inside the container."""


def cmdlines(host):
    out = host.check_output("for p in /proc/[0-9]*; do tr '\\0' ' ' < $p/cmdline 2>/dev/null; echo; done")
    return [line.strip() for line in out.splitlines() if line.strip()]


def test_server_tree_and_orphan_are_gone_decoys_alive(host):
    lines = cmdlines(host)
    assert not [c for c in lines if "--port 30000" in c or c.startswith("sglang::scheduler_TP1")]
    assert not [c for c in lines if "spawn_main" in c]
    assert len([c for c in lines if "sglang.launch_server" in c and "--port 30002" in c]) == 1
    assert len([c for c in lines if c.startswith("tail -f /root/sglang.log")]) == 1


def test_the_discovery_wrote_nothing(host):
    """It returned the capture (`stored`, the converge's assert); the step that acts on the server keeps it."""
    assert not host.file("/var/lib/inferops/cutover/30000").exists


def test_gpu0_stray_gone_gpu1_tenant_and_daemon_alive(host):
    lines = cmdlines(host)
    assert not [c for c in lines if "/dev/nvidia0 /dev/nvidiactl" in c]
    assert len([c for c in lines if "/dev/nvidia1 /dev/nvidiactl" in c]) == 1
    assert host.service("nvidia-persistenced").is_running
    pid = host.check_output("systemctl show -p MainPID --value nvidia-persistenced")
    assert "/dev/nvidia0" in host.check_output("ls -l /proc/%s/fd" % pid)


def test_no_device_holder_but_the_daemon_and_the_tenant(host):
    holders = host.check_output(
        "for p in /proc/[0-9]*; do ls -l $p/fd 2>/dev/null | grep -q /dev/nvidia0 && basename $p; done; true").split()
    names = sorted(host.file("/proc/%s/comm" % p).content_string.strip() for p in holders)
    assert names == ["nvidia-persiste"]
