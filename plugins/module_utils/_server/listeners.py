# -*- coding: utf-8 -*-
# Copyright: inferops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What listens on a port (/proc/net/tcp, the processes' open sockets), and who accepted a connection to it."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import binascii
import os
import socket
import time

from ansible_collections.inferops.sglang.plugins.module_utils._host import procfs as _procfs
from ansible_collections.inferops.sglang.plugins.module_utils._server import family as _family


LISTEN = "0A"
ESTABLISHED = "01"
ACCEPT_WAIT = 5.0  # how long a server may take to accept a connection before the key is withheld


def _rows(proc="/proc"):
    """(state, local address, local port, remote address, remote port, inode, uid) of each TCP socket (IPv4, IPv6),
    the addresses as text (an IPv4-mapped IPv6 one as IPv4)."""
    for name in ("tcp", "tcp6"):
        try:
            with open("%s/net/%s" % (proc, name)) as f:
                next(f)
                rows = [line.split() for line in f]
        except (OSError, StopIteration):
            continue
        for fields in rows:
            try:
                local, lport = fields[1].rsplit(":", 1)
                remote, rport = fields[2].rsplit(":", 1)
                yield fields[3], _ip(local), int(lport, 16), _ip(remote), int(rport, 16), fields[9], int(fields[7])
            except (IndexError, ValueError, TypeError):
                continue


def _ip(address):
    """An address as /proc/net/tcp{,6} print it (hex; IPv6 as four host-order 32-bit words), as text."""
    raw = binascii.unhexlify(address)
    if len(raw) == 4:
        return socket.inet_ntop(socket.AF_INET, raw[::-1])
    return _plain(socket.inet_ntop(socket.AF_INET6, b"".join(raw[i:i + 4][::-1] for i in range(0, 16, 4))))


def _plain(host):
    """An IPv4-mapped IPv6 address (::ffff:127.0.0.1) as the IPv4 address it maps."""
    return host[7:] if host.startswith("::ffff:") and "." in host else host


def _sockets(port, proc="/proc"):
    """(state, local address, inode, uid) of each TCP socket whose local port is port (IPv4, IPv6)."""
    for state, address, lport, dummy, dummy2, inode, uid in _rows(proc):
        if lport == port:
            yield state, address, inode, uid


def listening_inodes(port, proc="/proc"):
    """Socket inodes listening on TCP port (IPv4 and IPv6)."""
    return set(inode for state, address, inode, uid in _sockets(port, proc) if state == LISTEN)


def connections(port, proc="/proc"):
    """How many client connections to port are open (ESTABLISHED on the server's side)."""
    return sum(1 for state, address, inode, uid in _sockets(port, proc) if state == ESTABLISHED)


def local_url(port, proc="/proc"):
    """http://ADDRESS:port of a socket listening on port, a wildcard address read as loopback; None if none."""
    for state, address, inode, uid in _sockets(port, proc):
        if state != LISTEN:
            continue
        if ":" not in address:
            return "http://%s:%d" % ("127.0.0.1" if address == "0.0.0.0" else address, port)
        return "http://[%s]:%d" % ("::1" if address == "::" else address, port)
    return None


def _ends(sock):
    """(this end, the server's end) of a client socket, each (address, port); None once the connection is reset
    (ENOTCONN: the listener closed, its process gone, before any process accepted it)."""
    try:
        mine, peer = sock.getsockname()[:2], sock.getpeername()[:2]
    except OSError:
        return None
    return (_plain(mine[0]), mine[1]), (_plain(peer[0]), peer[1])


def accepted(sock, proc="/proc"):
    """socket:[INODE] of the server's end of a connected client socket (the row whose remote address is the
    client's), or None while no process has accepted the connection (the kernel shows inode 0 until then) or once
    it was reset."""
    ends = _ends(sock)
    if ends is None:
        return None
    mine, peer = ends
    for state, local, lport, remote, rport, inode, uid in _rows(proc):
        if (local, lport) == peer and (remote, rport) == mine and inode != "0":
            return "socket:[%s]" % inode
    return None


def _accepting(sock, unit, pid, wait):
    """(socket:[INODE] of the server's end of this client connection, None when no process accepted it within wait;
    whether a process of `unit` (a service name) or of the family of `pid` holds it; whose that is, in words)."""
    deadline = time.monotonic() + wait
    inode = accepted(sock)
    while inode is None and time.monotonic() < deadline and _ends(sock) is not None:
        time.sleep(0.01)
        inode = accepted(sock)
    if unit:
        allowed, whose = [p for p in _procfs.pids() if _procfs.unit_of(p) == unit], unit
    else:
        procs = _procfs.snapshot()
        server = procs.get(pid)
        allowed, whose = (_family.family_of(server, procs) if server is not None else []), "pid %s's family" % pid
    ours = inode is not None and any(inode in _procfs.open_files(p).values() for p in allowed)
    return inode, ours, whose


def peer_problem(sock, unit=None, pid=None, wait=ACCEPT_WAIT):
    """None when the process that accepted this client connection is of `unit` (a service name) or of the family of
    `pid`: the server the API key is for. Else why not. A request with the key is sent only after this: during a
    model load the port is free, and any local user may bind it."""
    ends = _ends(sock)
    if ends is None:
        return "the connection was reset before a process accepted it"
    port = ends[1][1]
    inode, ours, whose = _accepting(sock, unit, pid, wait)
    if inode is None:
        return "no process accepted the connection to port %d within %g s" % (port, wait)
    if ours:
        return None
    return "the connection to port %d was accepted by no process of %s" % (port, whose)


def squatter(host, port, unit=None, pid=None, wait=1.0):
    """What holds host:port instead of the server waited for (`unit`, a service name, or the family of `pid`), or None.
    A real SGLang server binds its port only once its model is loaded; when another process holds it by then, the
    bind fails and the server cannot serve, yet it lives on for minutes (its warm-up talks to the holder), ignores
    SIGTERM and keeps its GPU memory: a wait that sees the port taken fails at once instead of waiting out its
    timeout. Taken means: a connection to host:port accepted by a process this user can read, of neither. None while
    nothing listens or the connection was reset (its listener closed before accepting it), when the server's own process
    accepted it, or when who accepted it cannot be told."""
    try:
        sock = socket.create_connection((host, port), timeout=wait)
    except OSError:
        return None
    try:
        inode, ours, whose = _accepting(sock, unit, pid, wait)
        if inode is None or ours:
            return None
        procs = _procfs.snapshot()
        holder = next((q for q in sorted(procs) if inode in _procfs.open_files(q).values()), None)
    finally:
        sock.close()
    if holder is None:
        return None
    return "port %d is held by pid %d (%s), not by %s: the server cannot bind it" % (
        port, holder, procs[holder].cmdline[:120], whose)


def listeners(port, procs):
    """Pids holding a socket that listens on port."""
    want = set("socket:[%s]" % i for i in listening_inodes(port))
    if not want:
        return []
    return sorted(pid for pid in procs if want & set(_procfs.open_files(pid).values()))


def listening_ports(procs):
    """{pid: [ports]} of every process holding a socket that listens on a TCP port (IPv4, IPv6)."""
    port_of = dict(("socket:[%s]" % inode, lport) for state, dummy, lport, dummy2, dummy3, inode, dummy4 in _rows()
                   if state == LISTEN and inode != "0")
    out = {}
    if not port_of:
        return out
    for pid in procs:
        ports = set(port_of[t] for t in _procfs.open_files(pid).values() if t in port_of)
        if ports:
            out[pid] = sorted(ports)
    return out


def _fds_readable(pid):
    try:
        fds = os.listdir("%s/%d/fd" % (_procfs.PROC, pid))
        if fds:
            os.readlink("%s/%d/fd/%s" % (_procfs.PROC, pid, fds[0]))
        return True
    except OSError:
        return False


def hidden_listeners(port, procs, proc="/proc"):
    """The sockets listening on port that no process this one can inspect holds (another user's process, without
    CAP_SYS_PTRACE over it: a default podman container): [{inode, uid, user, unreadable}], unreadable being the
    pids of the socket's user whose open files cannot be read - who may hold it."""
    held = set()
    for pid in procs:
        held.update(t for t in _procfs.open_files(pid).values() if t.startswith("socket:["))
    out = []
    for state, address, inode, uid in _sockets(port, proc):
        if state != LISTEN or "socket:[%s]" % inode in held or inode == "0":
            continue
        unreadable = sorted(pid for pid, q in procs.items() if q.uid == uid and not _fds_readable(pid))
        out.append(dict(inode=int(inode), uid=uid, user=_procfs.user_name(uid), unreadable=unreadable))
    return out


def hidden_message(port, hidden):
    """What to say of a port in use by sockets no readable process holds."""
    return "port %d is in use, by %s that no process this user can inspect holds (reading a process's open files " \
        "needs CAP_SYS_PTRACE over it, which root lacks in a default container): %s" % (port, (
            "a listening socket" if len(hidden) == 1 else "%d listening sockets" % len(hidden)), "; ".join(
            "inode %d, owned by uid %d (%s)%s" % (h["inode"], h["uid"], h["user"], (
                ", maybe pid %s (that user's processes whose files cannot be read)" % ", ".join(
                    str(x) for x in h["unreadable"][:10])) if h["unreadable"] else "") for h in hidden))


def main_process(pid, procs):
    """The topmost process of the same command line above pid (a listener may be a forked child)."""
    proc = procs[pid]
    while proc.ppid in procs and procs[proc.ppid].cmdline == proc.cmdline:
        proc = procs[proc.ppid]
    return proc


def listener_problem(port, unit=None, pid=None):
    """None when what listens on port is the server being waited for: a process of `unit` (a service name), or of
    the family of `pid`; else what listens instead. A real server whose port is taken keeps loading and its warm-up
    talks to whoever holds the port, so an answer on the port alone proves nothing."""
    procs = _procfs.snapshot()
    pids = listeners(port, procs)
    if not pids:
        return "nothing that can be read listens on port %d" % port
    if unit:
        foreign = [p for p in pids if _procfs.unit_of(p) != unit]
        whose = unit
    else:
        server = procs.get(pid)
        members = set(_family.family_of(server, procs)) if server is not None else set()
        foreign = [p for p in pids if p not in members]
        whose = "pid %s's family" % pid
    if not foreign:
        return None
    return "port %d is held by pid %s (%s), not by %s" % (
        port, foreign[0], procs[foreign[0]].cmdline[:120] if foreign[0] in procs else "?", whose)
