"""Test-bed containers for the benchmarks: systemd, the SGLang double, reached over SSH with pipelining and
ControlPersist as in production."""
import os
import re
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
KEY = ROOT / ".cache" / "ssh" / "id_ed25519"
BIN = Path(sys.executable).parent

LAUNCH = ("cd /root; SGLANG_DOUBLE_LOAD_SECONDS=%s SGLANG_DOUBLE_WARMUP_SECONDS=1 "
          "SGLANG_DOUBLE_STATE_FILE=/root/double-state.jsonl SGLANG_DOUBLE_DEVICES='/dev/nvidia*' "
          "nohup /opt/sglang/venv/bin/python -m sglang.launch_server --model-path /models/tiny-llama --tp 2 "
          "--port 30000 > /root/sglang.log 2>&1 < /dev/null &")
READY = ("python3 -c \"import urllib.request as u; print(u.urlopen('http://127.0.0.1:30000/ready', "
         "timeout=2).status)\" 2>/dev/null")


def sh(argv, **kw):
    return subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True, check=False,
                          **kw)


class Testbed:
    """Containers named PREFIX-NAME for the given names, reached over SSH at their own address."""

    def __init__(self, hosts, prefix="inferops-bench", volumes=()):
        self.hosts = list(hosts)
        self.prefix = prefix
        self.volumes = ["-v%s" % v for v in volumes]  # podman -v SRC:DST[:OPTIONS] for each host
        self.inventory = None
        self.last_cpu = 0.0  # CPU seconds (user + system) the last ansible-playbook run took on the controller
        self.addresses = {}

    def address(self, host):
        """The container's own address on podman's bridge (published ports lose their forwarding while other
        containers start; the address does not)."""
        if host not in self.addresses:
            self.addresses[host] = sh(["podman", "inspect", "-f", "{{.NetworkSettings.IPAddress}}",
                                       "%s-%s" % (self.prefix, host)]).stdout.strip()
        return self.addresses[host]

    def ssh(self, host, cmd):
        return sh(["ssh", "-q", "-i", str(KEY), "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null",
                   "root@%s" % self.address(host), cmd]).stdout

    def start(self, host):
        name = "%s-%s" % (self.prefix, host)
        self.addresses.pop(host, None)
        sh(["podman", "rm", "-f", name])
        r = sh(["podman", "run", "-d", "--name", name, "--systemd", "always", "--ulimit", "nofile=1024:20000",
                "--ulimit", "nproc=4096:4096",
                "-v", "%s.pub:/root/.ssh/authorized_keys:ro" % KEY, "-v", os.environ["INFEROPS_CGROUP_VOLUME"]]
               + self.volumes + [os.environ["INFEROPS_TESTBED_IMAGE"], "/lib/systemd/systemd"])
        assert r.returncode == 0, r.stdout

    def booted(self, host, timeout=120):
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.ssh(host, "systemctl is-system-running --wait").strip() in ("running", "degraded"):
                return
            time.sleep(0.5)
        raise SystemExit("%s did not boot" % host)

    def up(self):
        for host in self.hosts:
            self.start(host)
        for host in self.hosts:
            self.booted(host)
        with tempfile.NamedTemporaryFile("w", suffix=".ini", delete=False) as f:
            for host in self.hosts:
                f.write("%s ansible_host=%s ansible_user=root ansible_ssh_private_key_file=%s "
                        "ansible_python_interpreter=/usr/bin/python3\n" % (host, self.address(host), KEY))
            f.write("[sglang_servers]\n" + "\n".join(self.hosts) + "\n")
            self.inventory = f.name

    def down(self):
        for host in self.hosts:
            sh(["podman", "rm", "-f", "%s-%s" % (self.prefix, host)])
        if self.inventory:
            os.unlink(self.inventory)

    def env(self):
        e = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(ROOT / ".cache" / "collections"), ANSIBLE_NOCOLOR="1",
                 ANSIBLE_HOST_KEY_CHECKING="0", ANSIBLE_PIPELINING="1", ANSIBLE_INVENTORY=self.inventory,
                 ANSIBLE_SSH_ARGS="-o ControlMaster=auto -o ControlPersist=120s -o UserKnownHostsFile=/dev/null "
                                  "-o StrictHostKeyChecking=no -o LogLevel=ERROR")
        e.pop("ANSIBLE_CONFIG", None)
        return e

    def playbook(self, path, limit, *extra):
        """(wall seconds, {host: (changed, failed)}) of one ansible-playbook run; exits when it fails."""
        t = time.monotonic()
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        r = sh([str(BIN / "ansible-playbook"), str(path), "--limit", limit] + list(extra), env=self.env())
        wall = time.monotonic() - t
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        self.last_cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        recap = dict((m.group(1), (int(m.group(2)), int(m.group(3)))) for m in re.finditer(
            r"^(\S+)\s+: ok=\d+\s+changed=(\d+)\s+unreachable=\d+\s+failed=(\d+)", r.stdout, re.M))
        if r.returncode != 0:
            print(r.stdout[-3000:], file=sys.stderr)
            raise SystemExit("%s failed on %s" % (Path(path).name, limit))
        return wall, recap

    def adhoc(self, host, load):
        """The host as the seeds left it: the double under nohup, ready."""
        self.ssh(host, "systemctl disable --now sglang-stock 2>/dev/null; rm -f /root/double-state.jsonl; "
                       "for n in 0 1; do touch /dev/nvidia$n; done; touch /dev/nvidiactl /dev/nvidia-uvm")
        self.ssh(host, LAUNCH % load)

    def wait_ready(self, host, timeout=120):
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.ssh(host, READY).strip() == "200":
                return
            time.sleep(0.3)
        raise SystemExit("%s never got ready" % host)
