"""A test-bed host restarted as a power cycle (tests/testbed/restart.sh, not `podman restart`: its comment says why).
This folder is on the verifier's path: `from restart import restart, active_again`."""
import os
import subprocess
import time

SCRIPT = os.path.join(os.environ["INFEROPS_ROOT"], "tests", "testbed", "restart.sh")


def restart(*names):
    """Every host named restarted at once; the script's exit status (0: every one is running again)."""
    return subprocess.run(["bash", SCRIPT] + list(names), stdout=subprocess.DEVNULL, check=False).returncode


def active_again(host, unit, seconds=120):
    """The unit's ActiveState once it is active or failed after a restart, or at the end of seconds (the last state
    read; None while sshd did not answer)."""
    deadline = time.time() + seconds
    state = None
    while time.time() < deadline:
        try:
            state = host.check_output("systemctl show %s --property=ActiveState --value" % unit)
        except Exception:  # pylint: disable=broad-except  # sshd not up yet
            state = None
        if state in ("active", "failed"):
            break
        time.sleep(1)
    return state
