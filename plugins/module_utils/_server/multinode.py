# -*- coding: utf-8 -*-
# Copyright: inferops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""A server spread over several hosts (`--nnodes N --node-rank R --dist-init-addr HOST:PORT`), read from its argv,
and why such a server is not cut over one host at a time: only as a group, each host's switch told its rank.

Every node runs the same command apart from `--node-rank`. Rank 0 serves the API and waits at start for every rank
to join at `--dist-init-addr`; a rank >= 1 runs only schedulers and, on the same `--port`, a dummy health server
whose /health answers 200 whatever the model does; stopping rank 0 ends every rank, and on SGLang 0.5.23 a rank >= 1
ignores SIGTERM. A unit made for one rank alone would stop, start and gate it wrongly.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

# the options and the dest each sets (`--nccl-init-addr`: the older spelling of --dist-init-addr, still accepted)
OPTIONS = (("--nnodes", "nnodes"), ("--node-rank", "node_rank"), ("--dist-init-addr", "dist_init_addr"),
           ("--nccl-init-addr", "dist_init_addr"))


def option(arg):
    """The dest of an argv word naming one of OPTIONS (in full, or as the unique prefix argparse accepts), and its
    inline `=value` or None; (None, None) for any other word."""
    name, eq, value = arg.partition("=")
    if not name.startswith("--") or len(name) < 4:
        return None, None
    hits = set(dest for full, dest in OPTIONS if full == name)
    if not hits:
        hits = set(dest for full, dest in OPTIONS if full.startswith(name))
    if len(hits) != 1:
        return None, None
    return hits.pop(), (value if eq else None)


def of_argv(argv):
    """{"nnodes", "node_rank", "dist_init_addr", "role"} of a server's argv when it is one rank of a multi-node server
    (--nnodes > 1), else None. role: "rank 0" (the API) or "rank >= 1" (schedulers and the dummy health only).
    The last occurrence wins, as in argparse; a value that is not a number is left as the text."""
    found = {}
    words = [str(a) for a in argv or ()]
    i = 1
    while i < len(words):
        dest, value = option(words[i])
        if dest and value is None and i + 1 < len(words):
            value = words[i + 1]
            i += 1
        if dest and value is not None:
            found[dest] = value
        i += 1
    nnodes = _number(found.get("nnodes", "1"))
    if nnodes == 1:
        return None
    rank = _number(found.get("node_rank", "0"))
    return {"nnodes": nnodes, "node_rank": rank, "dist_init_addr": found.get("dist_init_addr"),
            "role": "rank 0" if rank == 0 else "rank >= 1"}


def store_port(multi):
    """The port of --dist-init-addr (`host:port`, `[v6]:port`), where rank 0 hosts the group's store (torch's
    TCPStore, on every address), or None when it names none."""
    host, sep, port = str((multi or {}).get("dist_init_addr") or "").rpartition(":")
    return int(port) if sep and host and port.isdigit() and 0 < int(port) < 65536 else None


def _number(text):
    try:
        return int(text)
    except ValueError:
        return text


def describe(multi):
    return "rank %s of a %s-node SGLang server (--nnodes %s --node-rank %s --dist-init-addr %s)" % (
        multi["node_rank"], multi["nnodes"], multi["nnodes"], multi["node_rank"], multi["dist_init_addr"] or "unset")


def refusal(port, argv, what="the server on port", rank=None):
    """Why a switch (or an adoption) of this server on one host must not begin, or None: a single-node server, or one
    rank of a multi-node server whose group the caller switches as one, and that rank is `rank` (its --node-rank)."""
    multi = of_argv(argv)
    if multi is None:
        if rank is None:
            return None
        return ("%s %d is not one rank of a multi-node SGLang server (no --nnodes above 1), yet it is to be switched as "
                "rank %d of one" % (what, port, rank))
    if rank is not None:
        if multi["node_rank"] == rank:
            return None
        return "%s %d is %s, not rank %d as its group has it" % (what, port, describe(multi), rank)
    if multi["role"] == "rank 0":
        why = ("stopping it ends every rank, which must then start again together, ranks >= 1 with it")
    else:
        why = ("a rank >= 1 serves no API (its port answers only a dummy health check, 200 whatever the model does), "
               "and on SGLang 0.5.23 it ignores SIGTERM until rank 0 stops; cut over alone, its unit would stop it "
               "only at the kill timeout and call it ready at once")
    return ("%s %d is %s: %s. A multi-node server is cut over as one group, never host by host: the cutover switches "
            "the ranks of the hosts named by cutover_multinode_group together (docs/multinode.md)"
            % (what, port, describe(multi), why))
