"""`sglang serve --model-path M ...`: the same parser and server as `python -m sglang.launch_server`."""
import sys

from sglang._double.server import run_server
from sglang.srt.server_args import prepare_server_args


def serve(args, extra_argv):  # pylint: disable=unused-argument
    if any(h in extra_argv for h in ("-h", "--help")):
        print("Usage: sglang serve --model-path <model-name-or-path> [additional-arguments]\n")
        try:
            prepare_server_args(["--help"])
        except SystemExit:
            pass
        return 0
    if extra_argv and not extra_argv[0].startswith("-"):  # `sglang serve <model>`
        extra_argv = ["--model-path"] + list(extra_argv)
    sys.exit(run_server(prepare_server_args(extra_argv)))
