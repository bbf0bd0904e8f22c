# -*- coding: utf-8 -*-
# Copyright: inferops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""A server's arguments, parsed by the installed SGLang's own argument parser before anything is stopped.

The server's interpreter (python -m sglang.launch_server: the command's python; `sglang serve`: the python of the
console script's shebang) builds the parser as SGLang's entry points do (sglang.srt.server_args.prepare_server_args
in 0.5.x: ArgumentParser, ServerArgs.add_cli_args, the --config merge, parse_args) and parses. Parse only: the
ServerArgs object is never made (its post-init queries the GPUs), no model is loaded, no GPU is visible to it.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import subprocess

from ansible_collections.inferops.sglang.plugins.module_utils._host import owner as _owner

TIMEOUT = 120.0


class NotChecked(str):
    """Why the arguments could not be checked (a warning, not a refusal)."""


# Run by the server's interpreter: argv[1] the arguments (JSON), argv[2] the entry point ("launch_server.py" or
# "sglang serve"). Exit 2 with argparse's message on stderr when SGLang refuses them.
_PARSE = r"""
import argparse, json, sys
argv, prog = json.loads(sys.argv[1]), sys.argv[2]
if prog == "sglang serve":
    try:
        from sglang.cli.serve import _extract_model_type_override
    except ImportError:
        pass
    else:
        kind, argv = _extract_model_type_override(argv)
        if kind == "diffusion":
            print("diffusion")
            sys.exit(0)
try:
    from sglang.srt.server_args import ServerArgs
except ImportError as e:
    print("no sglang.srt.server_args (%s)" % e)
    sys.exit(3)
parser = argparse.ArgumentParser(prog=prog)
ServerArgs.add_cli_args(parser)
if "--config" in argv:
    from sglang.srt.server_args_config_parser import ConfigArgumentMerger
    argv = ConfigArgumentMerger(parser).merge_config_with_args(argv)
parser.parse_args(argv)
print("ok")
"""


def shebang(path):
    """The interpreter of a script's #! line, or None."""
    try:
        with open(path, "rb") as f:
            line = f.readline(4096)
    except (IOError, OSError):
        return None
    if not line.startswith(b"#!"):
        return None
    words = line[2:].decode("utf-8", "replace").split()
    if words and os.path.basename(words[0]) == "env" and len(words) > 1:
        return None  # #!/usr/bin/env python: which one depends on PATH, not the script
    return words[0] if words and os.path.basename(words[0]).startswith("python") else None


def parse_command(command):
    """(python, arguments, entry point) of a server's command as written, nothing read: python -m
    sglang.launch_server ARGS, or sglang serve ARGS (python None: its shebang names it); (command's python or None,
    None, None) for anything else."""
    if not command:
        return None, None, None
    exe = command[0]
    name = os.path.basename(exe)
    if name.startswith("python"):
        words = list(command[1:])
        for i, w in enumerate(words[:-1]):
            if w == "-m" and words[i + 1] == "sglang.launch_server":
                return exe, words[i + 2:], "launch_server.py"
        return exe, None, None
    if name == "sglang" and len(command) > 1 and command[1] == "serve":
        return None, list(command[2:]), "sglang serve"
    return None, None, None


def interpreter(command):
    """(python, arguments, entry point) of a server's command: python -m sglang.launch_server ARGS, or
    sglang serve ARGS (its shebang's python, read here); (command's python or None, None, None) for anything else."""
    python, arguments, entry = parse_command(command)
    if entry == "sglang serve":
        python = shebang(command[0])
        return python, (arguments if python else None), entry
    return python, arguments, entry


def start(python, arguments, prog, env=None, owner=None):
    """Start parsing (about 0.1 s with the double, seconds where the import pulls torch) as `owner` (an _owner.Owner;
    the caller when None), in a clean environment plus env, no GPU visible; answer() collects."""
    owner = owner or _owner.Owner(os.getuid(), os.getgid())
    env = dict(env or {}, CUDA_VISIBLE_DEVICES="", HIP_VISIBLE_DEVICES="")
    try:
        return owner.start([python, "-c", _PARSE, json.dumps(arguments), prog], env=env)
    except (OSError, subprocess.SubprocessError) as e:
        # not a refusal of the arguments: the unit's own checks (systemd-analyze verify, the interpreter's) say why
        return NotChecked("the server's arguments were not checked: %s cannot be run as %s (%s)" % (python, owner, e))


def answer(p, python, timeout=TIMEOUT):
    """Why the installed SGLang refuses the arguments start() gave it (argparse's own message), None when it takes
    them, or a NotChecked (a str) when it cannot parse them (no interpreter to run, no sglang.srt.server_args)."""
    if isinstance(p, str):
        return p
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        _owner.kill(p)
        return "SGLang's argument parser (%s) did not answer within %.0f s" % (python, timeout)
    if p.returncode == 0:
        return None
    if p.returncode == 3 and out.startswith("no sglang.srt.server_args"):
        return NotChecked("the server's arguments were not checked: the SGLang of %s has %s" % (python, out.strip()))
    lines = [x for x in err.strip().splitlines() if x.strip()]
    said = [x for x in lines if ": error: " in x] or lines[-1:]
    if p.returncode == 2 and said:
        return "SGLang refuses the server's arguments: %s" % said[-1].strip()
    return "SGLang's argument parser (%s) failed (rc %d): %s" % (python, p.returncode, (said or ["no output"])[-1][-300:])


def refusal(python, arguments, prog, timeout=TIMEOUT, env=None, owner=None):
    """answer() of start(): parse and wait."""
    return answer(start(python, arguments, prog, env, owner), python, timeout)


# The installed SGLang's version, as the interpreter's importlib finds it (no sglang module is imported)
_FIND_SGLANG = ("import importlib.util, importlib.metadata as m, sys\n"
                "if not importlib.util.find_spec('sglang'): sys.exit(3)\n"
                "print(m.version('sglang'))\n")


def ask_version(exe, owner):
    """Start asking the interpreter exe, as owner (an _owner.Owner, with its clean environment), for the installed
    SGLang's version (about 0.1 s); None when exe is no Python interpreter to ask, a str when it cannot be run."""
    if not exe or not os.path.basename(exe).startswith("python") or not (os.path.isfile(exe) and os.access(exe, os.X_OK)):
        return None
    try:
        return owner.start([exe, "-c", _FIND_SGLANG])
    except (OSError, subprocess.SubprocessError) as e:
        return "%s cannot be run as %s: %s" % (exe, owner, e)


def version(exe, asked, timeout=TIMEOUT):
    """(the installed SGLang's version or None, [problems]) for the executable exe, from ask_version's answer."""
    if not exe:
        return None, []
    if not (os.path.isfile(exe) and os.access(exe, os.X_OK)):
        return None, ["the unit's executable %s does not exist or is not executable" % exe]
    if asked is None:
        return None, []
    if isinstance(asked, str):
        return None, [asked]
    try:
        out, err = asked.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        _owner.kill(asked)
        out, err = "", "it did not answer within %.0f s" % timeout
    if asked.returncode != 0:
        return None, ["%s cannot find the sglang package (rc %d%s)" % (
            exe, asked.returncode, (": " + err.strip()[-300:]) if err.strip() else "")]
    return out.strip(), []


def public(v):
    """A version without its local part (0.5.23+cu130 -> 0.5.23): what SGLang's __version__ and its wheel agree on."""
    return v.partition("+")[0] if v else v


# The options that decide which GPUs a server's schedulers run on, and the dest of each (argparse's aliases of one
# option share a dest); FLAGS take no value. Read from the argv as argparse reads it: an option in full or as a prefix
# of exactly one of them (a prefix SGLang itself finds ambiguous never reaches a running server), the last one wins.
GPU_OPTIONS = (("--tp-size", "tp"), ("--tensor-parallel-size", "tp"), ("--dp-size", "dp"),
               ("--data-parallel-size", "dp"), ("--pp-size", "pp"), ("--pipeline-parallel-size", "pp"),
               ("--base-gpu-id", "base_gpu_id"), ("--gpu-id-step", "gpu_id_step"), ("--nnodes", "nnodes"),
               ("--node-rank", "node_rank"), ("--mem-fraction-static", "mem_fraction_static"))
GPU_FLAGS = (("--enable-dp-attention", "dp_attention"),)
_GPU_DEFAULTS = {"tp": "1", "dp": "1", "pp": "1", "base_gpu_id": "0", "gpu_id_step": "1", "nnodes": "1",
                 "node_rank": "0"}


def _option(arg, table):
    name, eq, value = arg.partition("=")
    if not name.startswith("--") or len(name) < 4:
        return None, None
    hits = set(dest for full, dest in table if full == name) or set(
        dest for full, dest in table if full.startswith(name))
    return (hits.pop(), (value if eq else None)) if len(hits) == 1 else (None, None)


def read_options(argv, options=GPU_OPTIONS, flags=GPU_FLAGS):
    """{dest: text} of the options (and True for the flags) a server's argv gives, as argparse reads them."""
    words = [str(a) for a in argv or ()]
    found = {}
    i = 1
    while i < len(words):
        dest, value = _option(words[i], tuple(options) + tuple(flags))
        if dest in set(d for dummy, d in flags):
            found[dest] = True
        elif dest:
            if value is None and i + 1 < len(words):
                value = words[i + 1]
                i += 1
            if value is not None:
                found[dest] = value
        i += 1
    return found


def _has_config(words):
    """Whether an argv gives --config (in full or as a prefix argparse takes): its file may set any option."""
    return any(_option(w, (("--config", "config"),))[0] for w in words[1:])


MODEL_OPTIONS = (("--model-path", "model_path"), ("--model", "model_path"), ("--served-model-name", "served_model_name"))


def served_model(argv):
    """The name a server of argv answers in /v1/models: its --served-model-name, else its --model-path (SGLang's
    default for the name); None when its argv cannot tell (a --config file may set either, or it names none)."""
    words = [str(a) for a in argv or ()]
    if _has_config(words):
        return None
    found = read_options(words, MODEL_OPTIONS, ())
    return found.get("served_model_name") or found.get("model_path")


def gpu_ids(argv):
    """The GPU indices (as the server's CUDA_VISIBLE_DEVICES numbers them) its schedulers run on, from its argv
    alone: --base-gpu-id, --gpu-id-step, --tp/--dp/--pp sizes, --nnodes/--node-rank (this node's share), as SGLang
    0.5.x places them (engine.py's `base_gpu_id + (pp_rank % pp_per_node) * tp_per_node + (tp_rank % tp_per_node) *
    gpu_id_step`; the data-parallel controller moves each replica on by tp * pp * gpu_id_step, apart from
    --enable-dp-attention, whose replicas share the TP group). ValueError, saying why, when the argv cannot tell
    (a --config file may set them, a value that is not a number)."""
    words = [str(a) for a in argv or ()]
    if _has_config(words):
        raise ValueError("its --config file may set the options that place it")
    found = dict(_GPU_DEFAULTS, **read_options(words))
    try:
        n = dict((k, int(found[k])) for k in _GPU_DEFAULTS)
    except ValueError:
        raise ValueError("its options %s are not all numbers" % ", ".join(
            "%s=%s" % (k, found[k]) for k in sorted(_GPU_DEFAULTS)))
    if min(n["tp"], n["dp"], n["pp"], n["nnodes"], n["gpu_id_step"]) < 1 or min(n["base_gpu_id"], n["node_rank"]) < 0:
        raise ValueError("its sizes are not positive (%s)" % ", ".join("%s=%d" % (k, n[k]) for k in sorted(n)))
    per_tp_group = max(n["nnodes"] // n["pp"], 1)
    tp_per_node = max(n["tp"] // per_tp_group, 1)
    pp_per_node = max(n["pp"] // n["nnodes"], 1)
    tp_ranks = range(tp_per_node * (n["node_rank"] % per_tp_group), tp_per_node * (n["node_rank"] % per_tp_group + 1))
    pp_ranks = range(pp_per_node * (n["node_rank"] // per_tp_group), pp_per_node * (n["node_rank"] // per_tp_group + 1))
    replicas = 1 if found.get("dp_attention") is True else n["dp"]
    out = set()
    for dp in range(replicas):
        for pp in pp_ranks:
            for tp in tp_ranks:
                out.add(n["base_gpu_id"] + dp * n["tp"] * n["pp"] * n["gpu_id_step"]
                        + (pp % pp_per_node) * tp_per_node + (tp % tp_per_node) * n["gpu_id_step"])
    return sorted(out)


def mem_fraction(argv):
    """--mem-fraction-static of an argv as a float, or None when it gives none (SGLang then picks one by GPU size)."""
    value = read_options(argv).get("mem_fraction_static")
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None
