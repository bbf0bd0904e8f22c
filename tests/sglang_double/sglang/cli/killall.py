"""`killall_sglang` (0.5.15+, entry point sglang.cli.killall:main): the real CI clean-up, as it behaves here.

With no GPU in sight (no CUDA_VISIBLE_DEVICES, no nvidia-smi) it reports SKIP and exits 0, as the real one;
with GPUs it SIGKILLs the SGLang processes of its PID namespace, matched by the real command-line pattern.
"""
import os
import re
import shutil
import signal
import sys
from pathlib import Path

from sglang._double.config import console_scripts, emulated_version

_SGLANG_PROCESS_PATTERNS = re.compile(
    r"sglang::|sglang\.launch_server|sglang\.bench|sglang\.data_parallel|sglang\.srt|sgl_diffusion::|sglang serve")


def _targets():
    cvd = os.environ.get("CUDA_VISIBLE_DEVICES", "").strip()
    return bool(cvd) or shutil.which("nvidia-smi") is not None


def main():
    version = emulated_version()
    if "killall_sglang" not in console_scripts(version):
        sys.stderr.write("killall_sglang: not part of sglang %s\n" % version)
        return 127
    if not _targets():
        print("killall_sglang: No GPUs detected, skipping cleanup\nSKIP")
        return 0
    me = os.getpid()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) in (1, me):
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode("utf-8", "replace")
        except OSError:
            continue
        if _SGLANG_PROCESS_PATTERNS.search(cmdline):
            try:
                os.kill(int(entry.name), signal.SIGKILL)
                print("PID %s: killed (%s)" % (entry.name, cmdline.strip()[:120]))
            except OSError:
                pass
    print("PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
