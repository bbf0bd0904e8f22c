"""`python -m sglang.launch_server ...`: parses with sglang.srt.server_args as the real one, then runs the double."""
import sys
import warnings

from sglang._double.config import at_least, emulated_version
from sglang._double.server import run_server
from sglang.srt.server_args import prepare_server_args

if __name__ == "__main__":
    if at_least(emulated_version(), "0.5.15"):
        warnings.warn("'python -m sglang.launch_server' is still supported, but 'sglang serve' is the recommended "
                      "entrypoint.\n  Example: sglang serve --model-path <model> [options]", UserWarning, stacklevel=1)
    sys.exit(run_server(prepare_server_args(sys.argv[1:])))
