"""The double's flags (per SGLANG_DOUBLE_VERSION) added onto the parser given, as SGLang's ServerArgs.add_cli_args does."""
import argparse, os
from sglang._double import config


class ServerArgs:
    @staticmethod
    def add_cli_args(parser):
        class Into:
            def __init__(self, *args, **kwargs):
                pass
            add_argument = staticmethod(parser.add_argument)
            def parse_args(self, argv):
                return argparse.Namespace(tp_size=1, dp_size=1)
        real, config.argparse = config.argparse, type("argparse", (), {"ArgumentParser": Into})
        try:
            config.parse_args([], os.environ.get("SGLANG_DOUBLE_VERSION", "0.5.23"))
        finally:
            config.argparse = real
