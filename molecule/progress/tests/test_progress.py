"""A 90 s model load: the cutover's output shows where the switch is at least every 30 s (the phase, the seconds,
the unit's log line), and the run completes although the controller's SSH connection was cut in the middle of the
wait: the switch's call runs on the host under async, looked at by short connections of its own."""
import json
import os
import re

from serving import serves_from_its_unit  # pylint: disable=import-error

OUT = os.environ["MOLECULE_EPHEMERAL_DIRECTORY"]
KEEP = os.path.join(os.environ["INFEROPS_ROOT"], "tests", "output")


def output(name):
    with open(os.path.join(OUT, name)) as f:
        return re.sub(r"\x1b\[[0-9;]*m", "", f.read())


def progress(text):
    """The progress lines' seconds, in order."""
    return [int(s) for s in re.findall(r'"msg": "(?:stopping|loading|warm-up|verifying)[^,"]*, (\d+) s', text)]


def why_it_failed(host):
    """A failed run's reasons (each fatal result's msg, its wait's answers), and the host's journal since the unit's
    first start (the unit's, its gate's and the switch's own lines), kept whole in tests/output/progress-*."""
    text = output("cutover.out")
    reasons = []
    for line in text.splitlines():
        if line.startswith(("fatal:", "failed:")):
            try:
                result = json.loads(line.split("=> ", 1)[1])
            except (IndexError, ValueError):
                reasons.append(line[:600])
                continue
            reasons.append({k: result.get(k) for k in ("msg", "phase", "phases", "endpoints", "wait_seconds", "log_lines")
                            if k in result})
    journal = host.run("journalctl --no-pager -o short-precise -u sglang-30000 -u 'inferops-sglang-switch-*'").stdout
    os.makedirs(KEEP, exist_ok=True)
    for name, content in (("progress-cutover.out", text), ("progress-journal.txt", journal)):
        with open(os.path.join(KEEP, name), "w") as f:
            f.write(content)
    return reasons, journal[-6000:]


def test_the_run_completed_after_the_cut(host):
    text = output("cutover.out")
    completed = text.rstrip().endswith("rc=0")  # a name, so that a failure prints the reasons, not the whole output
    assert completed, why_it_failed(host)
    assert "UNREACHABLE" not in text  # the look that the cut broke connected again
    assert "Exit request sent" in output("cut.out"), output("cut.out")  # the master connection was there, and closed
    serves_from_its_unit(host)


def test_a_progress_line_at_least_every_30_s_through_the_load(host):
    seconds = progress(output("cutover.out"))
    assert len(seconds) >= 3, seconds
    assert seconds == sorted(seconds) and seconds[-1] >= 60, seconds
    assert max(b - a for a, b in zip([0] + seconds, seconds)) <= 30, seconds
    assert re.search(r'"msg": "loading, \d+ s', output("cutover.out"))
