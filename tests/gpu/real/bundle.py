"""`make gpu-bundle`: the parts a call on the GPU machine carries to run a real SGLang 0.5.15 or 0.5.17 server there, built
on this (CPU) machine and cached under .cache/gpu-real/ (a second run reuses every part whose inputs did not change).

Parts, each packed on its own so that a call carries only what its suite needs (tests/gpu/real/README.md):
  server.tar.xz   sglang 0.5.15 and what it imports that the GPU machine lacks (locks/server.txt), installed with
                  `pip install --no-deps --no-compile --target`, stripped of what a Llama on Hopper with the
                  triton attention backend never loads (STRIP)
  server017.tar.xz  sglang 0.5.17 (the weight cache daemon's first version) in the same way (locks/server017.txt),
                  stripped further so that it fits one call with the ansible and systemd parts (STRIP)
  bench.tar.xz    `datasets`, which 0.5.15's bench_serving imports (locks/bench.txt)
  ansible.tar.xz  ansible-core and cryptography, for ansible-playbook with a local connection (locks/ansible.txt)
  systemd.tar     Debian 12's systemd 252 and a D-Bus daemon as .debs, with the libraries they link that the
                  GPU machine lacks (locks/systemd.txt; unpacked there by tests/gpu/real/cutover.sh)
Every wheel is pinned by its sha256 (pip --require-hashes), every .deb by version and sha256.
"""
import argparse
import glob
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", "..", ".."))
LOCKS = os.path.join(HERE, "locks")
CALL_MIB = 64  # what one call carries in all: the tracked tree and the parts its suite needs
# the most each server part may weigh packed: the suites that carry it with the ansible and systemd parts (cutover,
# heal, weights) need the tree (~3.2 MiB) + ansible (4.4) + systemd (5.4) beside it, with a margin
MAX_CARRY_MIB = {"server": 60, "server017": 49}
SERVER_PARTS = ("server", "server017")

# pip download for the GPU machine's Python (CPython 3.12, glibc 2.39, x86-64)
PLATFORM = ["--only-binary=:all:", "--python-version", "3.12", "--implementation", "cp"] + [
    a for tag in ("manylinux_2_34_x86_64", "manylinux_2_28_x86_64", "manylinux_2_27_x86_64",
                  "manylinux_2_24_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64",
                  "manylinux2010_x86_64", "manylinux_2_12_x86_64", "manylinux_2_5_x86_64", "manylinux1_x86_64",
                  "any") for a in ("--platform", tag)]

# Removed after install. Never loaded by `launch_server` for a Llama with --attention-backend triton
# --sampling-backend pytorch on Hopper: FA3 (1.7 GB) and FlashMLA, the Blackwell kernels, xgrammar's static
# library, the diffusion server, jedi's typeshed, zstandard's cffi backend (the C backend is used), byte code and
# console scripts. flashinfer/data stays: sgl_kernel's rmsnorm calls flashinfer.norm, which JIT-compiles
# data/csrc/norm.cu at the first forward (without it every server crashed there, 2026-12-01).
# 0.5.17 adds: sgl_kernel's InfLLM kernels (sparse attention, 29 MB; imported only by its own wrapper) and three Rust
# extensions a Llama served over HTTP never imports: sglang/srt/server/_core (the embedded Rust server, only under
# SGLANG_RUST_SERVER, imported inside RustServer.launch), sglang/srt/grpc/_core (only with --grpc-port, imported inside
# _start_native_grpc_server_for_runtime) and sglang/srt/multimodal/_core (the inkling image processor): 23 MB
# unpacked, ~7 MiB packed (2026-12-06).
_STRIP_SERVER = ["sgl_kernel/flash_ops.abi3.so", "sgl_kernel/flashmla_ops.abi3.so", "sgl_kernel/sm100",
                 "xgrammar/lib/libxgrammar.a", "sglang/multimodal_gen",
                 "jedi/third_party/typeshed", "zstandard/_cffi.cpython-312-x86_64-linux-gnu.so", "bin"]
STRIP = {
    "server": _STRIP_SERVER,
    "server017": _STRIP_SERVER + ["sgl_kernel/infllm_ops.cpython-310-x86_64-linux-gnu.so",
                                  "sglang/srt/server/_core.cpython-312-x86_64-linux-gnu.so",
                                  "sglang/srt/grpc/_core.cpython-312-x86_64-linux-gnu.so",
                                  "sglang/srt/multimodal/_core.cpython-312-x86_64-linux-gnu.so"],
    "bench": ["bin"],
    "ansible": ["bin", "ansible_test"],
}
PIP_PARTS = ("server", "server017", "bench", "ansible")


def python312():
    """A CPython 3.12 with pip: pip installs cp312 wheels only from a 3.12 interpreter."""
    found = shutil.which("python3.12")
    candidates = ([found] if found else []) + sorted(glob.glob(os.path.expanduser("~/.pyenv/versions/3.12*/bin/python3.12")))
    for py in candidates:
        if subprocess.call([py, "-m", "pip", "--version"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) == 0:
            return py
    raise SystemExit("make gpu-bundle needs CPython 3.12 with pip (python3.12 on PATH or under ~/.pyenv/versions)")


def digest(*paths):
    h = hashlib.sha256()
    for p in paths:
        with open(p, "rb") as f:
            h.update(f.read())
    return h


def stamp(part):
    """What a part is made from: its lock, this builder (the strip rules) and, for the server, the import check."""
    inputs = [os.path.join(LOCKS, part + ".txt"), os.path.abspath(__file__)]
    if part in SERVER_PARTS:
        inputs += [os.path.join(HERE, "imports.py"), os.path.join(HERE, "machine-packages.txt")]
    return digest(*inputs).hexdigest()


def run(cmd, **kw):
    print("+ " + " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True, **kw)


def fetch_wheels(py, part, cache):
    dest = os.path.join(cache, "wheels", part)
    os.makedirs(dest, exist_ok=True)
    # pip reuses the files already in dest when their hash matches the lock
    run([py, "-m", "pip", "download", "--quiet", "--no-deps", "--require-hashes", "--disable-pip-version-check",
         "-d", dest, "-r", os.path.join(LOCKS, part + ".txt")] + PLATFORM)
    return dest


def wheels_of(dest, part):
    """The lock's wheels in dest (other versions left there by an older lock are not installed)."""
    wanted = {}
    with open(os.path.join(LOCKS, part + ".txt")) as f:
        for line in f:
            line = line.split("#", 1)[0].strip()
            if line:
                spec = line.split()[0]
                name, version = spec.split("==")
                wanted[(name.replace("-", "_").lower(), version)] = True
    out = []
    for w in sorted(os.listdir(dest)):
        parts = w.split("-")
        if w.endswith(".whl") and (parts[0].lower(), parts[1]) in wanted:
            out.append(os.path.join(dest, w))
    if len(out) != len(wanted):
        raise SystemExit("%s: %d wheels for %d pins in %s" % (part, len(out), len(wanted), dest))
    return out


def strip(tree, part):
    for rel in STRIP[part]:
        path = os.path.join(tree, rel)
        if os.path.isdir(path):
            shutil.rmtree(path)
        elif os.path.exists(path):
            os.remove(path)
    for top, dirs, dummy in os.walk(tree):
        for d in list(dirs):
            if d == "__pycache__":
                shutil.rmtree(os.path.join(top, d))
                dirs.remove(d)


def tree_size(tree):
    return sum(os.path.getsize(os.path.join(t, f)) for t, dummy, fs in os.walk(tree) for f in fs)


def pack(tree, out):
    tmp = out + ".tmp"
    with open(tmp, "wb") as f:
        tar = subprocess.Popen(["tar", "-C", tree, "--sort=name", "--owner=0", "--group=0", "-cf", "-", "."],
                               stdout=subprocess.PIPE)
        subprocess.run(["xz", "-9", "-T0"], stdin=tar.stdout, stdout=f, check=True)
        if tar.wait() != 0:
            raise SystemExit("tar failed for " + tree)
    os.replace(tmp, out)


def build_pip_part(py, part, cache):
    dest = fetch_wheels(py, part, cache)
    tree = tempfile.mkdtemp(prefix="gpu-bundle-%s-" % part)
    try:
        run([py, "-m", "pip", "install", "--quiet", "--no-deps", "--no-compile", "--disable-pip-version-check",
             "--target", tree] + wheels_of(dest, part))
        strip(tree, part)
        info = {"unpacked_bytes": tree_size(tree)}
        if part in SERVER_PARTS:
            from imports import missing, roots_of  # pylint: disable=import-outside-toplevel

            lost = missing(tree, os.path.join(HERE, "machine-packages.txt"), roots_of(tree))
            if lost:
                raise SystemExit(part + " part: modules the server imports at module level that neither the part "
                                 "nor the GPU machine has: %s" % ", ".join(sorted(lost)))
        out = os.path.join(cache, part + ".tar.xz")
        pack(tree, out)
        info["packed_bytes"] = os.path.getsize(out)
        return info
    finally:
        shutil.rmtree(tree, ignore_errors=True)


def debs():
    """[(package, version, sha256)] of locks/systemd.txt."""
    out = []
    with open(os.path.join(LOCKS, "systemd.txt")) as f:
        for line in f:
            line = line.split("#", 1)[0].strip()
            if line:
                pkg, sha = line.split()
                name, version = pkg.split("=", 1)
                out.append((name, version, sha))
    return out


def build_systemd(cache):
    dest = os.path.join(cache, "debs")
    os.makedirs(dest, exist_ok=True)
    files = []
    for name, version, sha in debs():
        have = [p for p in glob.glob(os.path.join(dest, "%s_*.deb" % name))
                if digest(p).hexdigest() == sha]
        if not have:
            run(["apt-get", "download", "-q", "%s=%s" % (name, version)], cwd=dest)
            have = [p for p in glob.glob(os.path.join(dest, "%s_*.deb" % name)) if digest(p).hexdigest() == sha]
            if not have:
                raise SystemExit("%s=%s: no .deb with sha256 %s (apt-get update, or a changed archive)" % (name, version, sha))
        files.append(os.path.basename(have[0]))
    out = os.path.join(cache, "systemd.tar")
    run(["tar", "-C", dest, "--owner=0", "--group=0", "-cf", out + ".tmp"] + sorted(files))
    os.replace(out + ".tmp", out)
    return {"packed_bytes": os.path.getsize(out), "debs": len(files)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("parts", nargs="*", default=list(PIP_PARTS) + ["systemd"], help="server server017 bench ansible systemd")
    ap.add_argument("--cache", default=os.path.join(ROOT, ".cache", "gpu-real"))
    args = ap.parse_args()
    os.makedirs(args.cache, exist_ok=True)
    sys.path.insert(0, HERE)
    py = python312() if set(args.parts) & set(PIP_PARTS) else None
    sizes_path = os.path.join(args.cache, "sizes.json")
    sizes = json.load(open(sizes_path)) if os.path.exists(sizes_path) else {}
    for part in args.parts:
        ext = ".tar" if part == "systemd" else ".tar.xz"
        out = os.path.join(args.cache, part + ext)
        stamp_path = os.path.join(args.cache, part + ".stamp")
        want = stamp(part)
        if os.path.exists(out) and os.path.exists(stamp_path) and open(stamp_path).read() == want:
            print("%s: cached (%s, %.1f MiB)" % (part, out, os.path.getsize(out) / 2 ** 20))
            continue
        info = build_systemd(args.cache) if part == "systemd" else build_pip_part(py, part, args.cache)
        with open(stamp_path, "w") as f:
            f.write(want)
        sizes[part] = info
        with open(sizes_path, "w") as f:
            json.dump(sizes, f, indent=1, sort_keys=True)
        print("%s: %.1f MiB packed%s" % (part, info["packed_bytes"] / 2 ** 20, (
            ", %.0f MiB unpacked" % (info["unpacked_bytes"] / 2 ** 20)) if "unpacked_bytes" in info else ""))
    for part, most in sorted(MAX_CARRY_MIB.items()):
        server = os.path.join(args.cache, part + ".tar.xz")
        if os.path.exists(server) and os.path.getsize(server) > most * 2 ** 20:
            raise SystemExit("%s part is %.1f MiB, over %d MiB: strip more" % (part, os.path.getsize(server) / 2 ** 20, most))
    carried(args.cache)


def carried(cache):
    """What a call of each suite that runs systemd carries: the tracked tree and its parts, against CALL_MIB."""
    try:
        files = subprocess.run(["git", "-C", ROOT, "ls-files", "-z"], stdout=subprocess.PIPE, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return
    tree = sum(os.path.getsize(os.path.join(ROOT, f)) for f in files.decode().split("\0")
               if f and os.path.isfile(os.path.join(ROOT, f)))
    for suite, server in (("cutover/heal", "server"), ("weights", "server017")):
        parts = [os.path.join(cache, n) for n in (server + ".tar.xz", "ansible.tar.xz", "systemd.tar")]
        if all(os.path.exists(p) for p in parts):
            total = tree + sum(os.path.getsize(p) for p in parts)
            print("%s call: tree %.1f MiB + %s = %.1f MiB of %d" % (
                suite, tree / 2 ** 20, " + ".join("%s %.1f" % (os.path.basename(p), os.path.getsize(p) / 2 ** 20)
                                                  for p in parts), total / 2 ** 20, CALL_MIB))
            if total > CALL_MIB * 2 ** 20:
                raise SystemExit("the %s call would carry %.1f MiB, over %d MiB" % (suite, total / 2 ** 20, CALL_MIB))


if __name__ == "__main__":
    main()
