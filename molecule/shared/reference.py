"""The record reference's parser (tests/tools/record_fields.py) for the scenarios' verifiers, loaded by its path: in a
verifier, `tests` is the scenario's own folder. This folder is on the verifier's path (.config/molecule/config.yml):
`from reference import record_fields`."""
import importlib.util
import os

_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_SPEC = importlib.util.spec_from_file_location("record_fields", os.path.join(_ROOT, "tests", "tools", "record_fields.py"))
record_fields = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(record_fields)
