"""`python -m sglang.launch_server ...`: the double's entry point, as in the real package."""
import sys

from sglang._double.server import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
