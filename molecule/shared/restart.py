"""A test-bed host restarted as a power cycle (tests/testbed/restart.sh, not `podman restart`: its comment says why).
This folder is on the verifier's path: `from restart import restart`."""
import os
import subprocess

SCRIPT = os.path.join(os.environ["INFEROPS_ROOT"], "tests", "testbed", "restart.sh")


def restart(*names):
    """Every host named restarted at once; the script's exit status (0: every one is running again)."""
    return subprocess.run(["bash", SCRIPT] + list(names), stdout=subprocess.DEVNULL, check=False).returncode
