# -*- coding: utf-8 -*-
# Copyright: inferops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""SGLang's weight cache daemon (0.5.17 and later) for a server's command: the daemon's own command, the server's
command as its client, and what keeps a server from using one.

The daemon (`python -m sglang.srt.weight_cache.daemon`) loads the model's weights once, after quantization and
sharded as the server's ranks use them, and keeps them on the GPUs; a server started with `--weight-cache-mode
client` maps them over CUDA IPC instead of reading the disk. Its config must equal the server's (model path, TP, PP,
DP, EP, load format, dtype, quantization, revision): a client of another config is refused by SGLang and exits."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

from ansible_collections.inferops.sglang.plugins.module_utils._host import (
    nvidia as _nvidia, procfs as _procfs, systemd as _systemd)
from ansible_collections.inferops.sglang.plugins.module_utils._host.command import CommandError
from ansible_collections.inferops.sglang.plugins.module_utils._server.sglang_args import parse_command, read_options


SINCE = (0, 5, 17)  # sglang/srt/weight_cache/ first ships in 0.5.17 (not in 0.5.16)
MODULE = "sglang.srt.weight_cache.daemon"

# The server's options the daemon takes too (0.5.17 daemon.py `__main__`, :819-891), as the server spells them
# (each alias of one option shares a dest), and the daemon's name of each: the daemon's config must equal the server's.
OPTIONS = (("--model-path", "model_path"), ("--model", "model_path"),
           ("--tp-size", "tp_size"), ("--tensor-parallel-size", "tp_size"),
           ("--dp-size", "dp_size"), ("--data-parallel-size", "dp_size"),
           ("--ep-size", "ep_size"), ("--expert-parallel-size", "ep_size"),
           ("--pp-size", "pp_size"), ("--pipeline-parallel-size", "pp_size"),
           ("--base-gpu-id", "base_gpu_id"), ("--gpu-id-step", "gpu_id_step"),
           ("--load-format", "load_format"), ("--dtype", "dtype"), ("--quantization", "quantization"),
           ("--model-loader-extra-config", "model_loader_extra_config"), ("--revision", "revision"),
           # read for the refusals only
           ("--nnodes", "nnodes"), ("--speculative-algorithm", "speculative_algorithm"),
           ("--weight-cache-mode", "weight_cache_mode"), ("--weight-cache-socket", "weight_cache_socket"),
           ("--config", "config"))
FLAGS = (("--trust-remote-code", "trust_remote_code"),)
CARRIED = ("model_path", "tp_size", "dp_size", "ep_size", "pp_size", "base_gpu_id", "gpu_id_step", "load_format",
           "dtype", "quantization", "model_loader_extra_config", "revision")
# Quantization that goes over CUDA IPC (0.5.17 protocol.py IPC_QUANT_ALLOWLIST, :160-163): none, and FP8 (block-wise
# only: SGLang checks the model's config itself, and a server it refuses exits before it serves).
QUANTIZATION = ("fp8",)


def _version(text):
    try:
        return tuple(int(x) for x in str(text).partition("+")[0].split(".")[:3])
    except ValueError:
        return None


def options(command):
    """{dest: value} of the server command's options that concern the daemon (read as argparse reads them)."""
    arguments = parse_command(command)[1]
    return read_options([""] + list(arguments or ()), OPTIONS, FLAGS)


def problems(command, version=None):
    """What keeps this server command from a weight cache (each naming the rule and the value); [] when none. version:
    the installed SGLang's, when known."""
    arguments = parse_command(command)[1]
    if arguments is None:
        return ["the weight cache needs a server started as `python -m sglang.launch_server` or `sglang serve`, "
                "not %r" % (" ".join(command or ())[:120])]
    found = options(command)
    out = []
    if version is not None and (_version(version) or (0,)) < SINCE:
        out.append("the installed SGLang %s has no weight cache daemon (sglang.srt.weight_cache: 0.5.17 and later)"
                   % version)
    if "model_path" not in found:
        out.append("the weight cache needs the server's --model-path on its command line")
    if found.get("config"):
        out.append("the weight cache needs the server's options on its command line, not in --config %s"
                   % found["config"])
    if found.get("quantization") and found["quantization"] not in QUANTIZATION:
        out.append("--quantization %s: SGLang's weight cache shares only unquantized and block-wise FP8 weights "
                   "(fp8)" % found["quantization"])
    if found.get("speculative_algorithm"):
        out.append("--speculative-algorithm %s: SGLang refuses speculative decoding with a weight cache (the daemon "
                   "does not hold the draft model)" % found["speculative_algorithm"])
    if found.get("dp_size") not in (None, "1"):
        out.append("--dp-size %s: SGLang's weight cache daemon holds the ranks of one replica (tp x pp GPUs from "
                   "--base-gpu-id), not those of data-parallel replicas" % found["dp_size"])
    if found.get("nnodes") not in (None, "1"):
        out.append("--nnodes %s: the weight cache runs for a server on one host" % found["nnodes"])
    if found.get("weight_cache_mode") not in (None, "client"):
        out.append("--weight-cache-mode %s is on the command already: the cutover runs the daemon and the server as "
                   "its client" % found["weight_cache_mode"])
    if found.get("weight_cache_socket"):
        out.append("--weight-cache-socket %s: the cutover keeps the daemon's socket where SGLang puts it, in the "
                   "private /tmp the two units share" % found["weight_cache_socket"])
    return out


def daemon_command(command, python=None):
    """The daemon's command for this server command: its python (the command's, or `python` for a console script's,
    read on its host), `-m sglang.srt.weight_cache.daemon`, and the options
    that make its config the server's (the daemon's defaults where the server takes its own)."""
    python = parse_command(command)[0] or python
    found = options(command)
    argv = [python, "-m", MODULE]
    for dest in CARRIED:
        if found.get(dest) is not None:
            argv += ["--" + dest.replace("_", "-"), found[dest]]
    if found.get("trust_remote_code"):
        argv.append("--trust-remote-code")
    return argv


def client_command(command):
    """The server command as the daemon's client."""
    if options(command).get("weight_cache_mode") == "client":
        return list(command)
    return list(command) + ["--weight-cache-mode", "client"]


def local_ranks(command):
    """How many rank daemons the launcher starts on this host: one per GPU rank of a TP group times PP (DP replicas
    share them: daemon.py starts tp_size * pp_size ranks on one node)."""
    found = options(command)
    try:
        return max(int(found.get("tp_size", 1)), 1) * max(int(found.get("pp_size", 1)), 1)
    except ValueError:
        return 1


# What SGLang logs at each start (0.5.17 model_runner / ipc_loader; seen on a real 0.5.17): the weights' load time,
# and that they were mapped from the daemon
LOAD_END = re.compile(r"Load weight end\. elapsed=([0-9.]+) s")
MAPPED = "Zero-copy: mapped"
JOURNAL_LINES = 2000


def reading(run, unit, daemon, procs=None):
    """How the weight cache serves the unit (names with .service): the daemon's unit (state, main pid, restarts), its
    processes' GPU memory (nvidia-smi, where it is), and from the unit's journal each start's weight load time by
    SGLang's log (its slowest rank's), oldest first, whether the last start mapped its weights from the daemon, and
    the first load's time against the last (what a restart costs against a load from the disk). None when the daemon's unit is not
    installed (or systemd cannot be asked)."""
    try:
        state = _systemd.show(run, daemon, ("LoadState", "ActiveState", "SubState", "MainPID", "NRestarts"))
    except (RuntimeError, CommandError):  # no systemd to ask: no unit of it
        return None
    if state.get("LoadState") != "loaded":
        return None
    starts = [{"mapped": False, "loads": []}]  # each start of the unit in its journal: its ranks' loads
    for line in _systemd.journal(run, unit, JOURNAL_LINES):
        found = LOAD_END.search(line)
        if line.startswith("Starting "):  # systemd's line as it starts the unit ("Starting NAME.service - ...")
            starts.append({"mapped": False, "loads": []})
        elif MAPPED in line:
            starts[-1]["mapped"] = True
        elif found:
            starts[-1]["loads"].append(float(found.group(1)))
    starts = [s for s in starts if s["loads"]]
    loads = [max(s["loads"]) for s in starts]  # a start's load: its slowest rank's
    procs = _procfs.snapshot() if procs is None else procs
    pids = set(pid for pid in procs if _procfs.unit_of(pid) == daemon)
    memory = None
    smi = _nvidia.Smi(run)
    if smi.available and pids:
        try:
            memory = sum(a["used_memory_mib"] or 0 for a in smi.reading()["compute_apps"] if a["pid"] in pids)
        except (RuntimeError, OSError, ValueError, KeyError, CommandError):
            memory = None
    return {"unit": daemon, "active_state": state.get("ActiveState"), "main_pid": int(state.get("MainPID") or 0),
            "restarts": int(state.get("NRestarts") or 0), "gpu_memory_mib": memory, "load_seconds": loads[-10:],
            "mapped": bool(starts) and starts[-1]["mapped"],
            "first_load_seconds": loads[0] if loads else None}
