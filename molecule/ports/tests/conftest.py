import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "shared"))
from testinfra_hosts import pytest_collection_modifyitems, pytest_configure  # noqa: E402,F401  pylint: disable=wrong-import-position,unused-import
