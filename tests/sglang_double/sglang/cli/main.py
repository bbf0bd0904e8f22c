"""The `sglang` console script (entry point sglang.cli.main:main, as in the real wheels): `sglang serve ...`."""
import argparse
import sys

from sglang._double.config import at_least, emulated_version


def main():
    version = emulated_version()
    parser = argparse.ArgumentParser()
    subparsers = parser.add_subparsers(dest="subcommand", required=True)
    subparsers.add_parser("serve", help="Launch the SGLang server.", add_help=False)
    subparsers.add_parser("generate", help="Run inference on a multimodal model.", add_help=False)
    if at_least(version, "0.5.9"):
        subparsers.add_parser("version", help="Show the version information.")
    args, extra_argv = parser.parse_known_args()
    if args.subcommand == "serve":
        from sglang.cli.serve import serve

        return serve(args, extra_argv)
    if args.subcommand == "generate":
        sys.exit("sglang generate: diffusion models are not part of the SGLang double")
    print("sglang version: %s" % version)
    return 0
