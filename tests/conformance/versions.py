"""The real SGLang versions the double stands for; a new version is one more entry here (and its pinned
wheel in tests/testbed/wheels.sh)."""
import glob
import pathlib

VERSIONS = ("0.5.5", "0.5.9", "0.5.15", "0.5.17", "0.5.23")

ROOT = pathlib.Path(__file__).resolve().parents[2]
WHEELS = ROOT / ".cache" / "wheels" / "real"


def wheel_path(version):
    found = sorted(glob.glob(str(WHEELS / ("sglang-%s-*.whl" % version))))
    if len(found) != 1:
        raise FileNotFoundError("the real sglang %s wheel is not in %s: run tests/testbed/wheels.sh" % (version, WHEELS))
    return found[0]
