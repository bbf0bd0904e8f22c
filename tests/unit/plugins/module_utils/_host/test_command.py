"""External commands under coreutils' timeout, run for real: what they answer passes through, one that outlasts its
time (or ignores SIGTERM) is an error naming it."""
import sys
import time

import pytest

from ansible_collections.inferops.sglang.plugins.module_utils._host.command import TIMED_OUT, CommandError, timed

from ..conftest import run_command


class Recorded:
    """run_command for real, keeping each argv it was given."""

    def __init__(self):
        self.argv = []

    def __call__(self, argv):
        self.argv.append(argv)
        return run_command(argv)


def test_the_answer_passes_through_and_the_time_is_rounded_up_to_whole_seconds():
    run = Recorded()
    assert timed(run, ("sh", "-c", "echo out; echo err >&2; exit 3"), 1.2) == (3, "out\n", "err\n")
    assert run.argv == [["timeout", "-k", "2", "2", "sh", "-c", "echo out; echo err >&2; exit 3"]]
    assert timed(run, ["true"], 5) == (0, "", "") and run.argv[-1][:4] == ["timeout", "-k", "2", "5"]


def test_a_command_that_does_not_answer_in_time_is_an_error():
    t0 = time.monotonic()
    with pytest.raises(CommandError, match="^sleep did not answer within 1 s$"):
        timed(run_command, ["sleep", "30"], 0.2)
    assert time.monotonic() - t0 < 10


def test_one_that_ignores_sigterm_is_killed_2_s_later_and_is_an_error_too():
    ignores = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(30)"
    t0 = time.monotonic()
    with pytest.raises(CommandError, match="did not answer within 1 s"):
        timed(run_command, [sys.executable, "-c", ignores], 1)
    assert 2.5 < time.monotonic() - t0 < 20, "SIGTERM ignored: SIGKILL after 1 s + 2 s"


def test_a_missing_command_is_timeouts_answer_not_an_error():
    rc, out, err = timed(run_command, ["/nonexistent/nvidia-smi", "-L"], 5)
    assert rc == 127 and out == "" and "/nonexistent/nvidia-smi" in err
    assert TIMED_OUT == 124
