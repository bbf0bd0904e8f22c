"""A 90 s model load: the cutover's output shows where the switch is at least every 30 s (the phase, the seconds,
the unit's log line), and the run completes although the controller's SSH connection was cut in the middle of the
wait: the switch's call runs on the host under async, looked at by short connections of its own."""
import os
import re

from serving import serves_from_its_unit  # pylint: disable=import-error

OUT = os.environ["MOLECULE_EPHEMERAL_DIRECTORY"]


def output(name):
    with open(os.path.join(OUT, name)) as f:
        return re.sub(r"\x1b\[[0-9;]*m", "", f.read())


def progress(text):
    """The progress lines' seconds, in order."""
    return [int(s) for s in re.findall(r'"msg": "(?:stopping|loading|warm-up|verifying)[^,"]*, (\d+) s', text)]


def test_the_run_completed_after_the_cut(host):
    text = output("cutover.out")
    failed = [line[:2000] for line in text.splitlines() if line.startswith(("fatal:", "failed:"))]
    assert text.rstrip().endswith("rc=0"), (failed, host.run("journalctl -u sglang-30000 --no-pager -n 40").stdout)
    assert "UNREACHABLE" not in text  # the look that the cut broke connected again
    assert "Exit request sent" in output("cut.out"), output("cut.out")  # the master connection was there, and closed
    serves_from_its_unit(host)


def test_a_progress_line_at_least_every_30_s_through_the_load(host):
    seconds = progress(output("cutover.out"))
    assert len(seconds) >= 3, seconds
    assert seconds == sorted(seconds) and seconds[-1] >= 60, seconds
    assert max(b - a for a, b in zip([0] + seconds, seconds)) <= 30, seconds
    assert re.search(r'"msg": "loading, \d+ s', output("cutover.out"))
