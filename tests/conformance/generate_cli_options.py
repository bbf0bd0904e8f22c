"""Writes the double's per-version command-line options (sglang/_double/cli_options.py) from the real wheels.

    .venv/bin/python tests/conformance/generate_cli_options.py

Run after adding a version to tests/conformance/versions.py (the wheels come from tests/testbed/wheels.sh);
test_conformance.py fails while the written file differs from what the wheels say.
"""
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2]))
from tests.conformance.realwheel import RealWheel  # noqa: E402  pylint: disable=wrong-import-position
from tests.conformance.versions import VERSIONS, wheel_path  # noqa: E402  pylint: disable=wrong-import-position

TARGET = pathlib.Path(__file__).resolve().parents[1] / "sglang_double" / "sglang" / "_double" / "cli_options.py"
HEADER = '''"""The real server's command-line options, per version: (option strings, dest, nargs), nargs 0 for no value.

Generated from the real wheels' ServerArgs.add_cli_args by tests/conformance/generate_cli_options.py;
tests/conformance checks it against the wheels. Do not edit by hand.
"""
# fmt: off
'''


def render():
    lines = ["OPTIONS = {"]
    for v in VERSIONS:
        lines.append("    %r: (" % v)
        lines += ["        %r," % (option,) for option in RealWheel(wheel_path(v)).cli_options()]
        lines.append("    ),")
    return HEADER + "\n".join(lines + ["}"]) + "\n"


if __name__ == "__main__":
    TARGET.write_text(render())
    print("wrote %s" % TARGET)
