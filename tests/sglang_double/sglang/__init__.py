"""Test double of the SGLang server (see tests/sglang_double/README.md)."""
from sglang._double.config import emulated_version as _emulated_version

__version__ = _emulated_version()
