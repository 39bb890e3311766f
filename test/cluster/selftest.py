#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""selftest.py DIR: checks a netns.sh cluster: reachability, a silent link down, partitions, healing.

One process opens sockets in every host's network namespace (setns in this
thread; a socket keeps the namespace it was made in) and drives netns.sh:

- every host reaches every other host's listener;
- linkdown: an established connection between hosts 1 and 2 goes silent in
  both directions (no FIN, no RST, no error on either socket, only
  retransmissions), and once the link is up again the bytes sent meanwhile
  arrive on the same connection: nothing was reset;
- partitions (1,2 | 3,4 and 1,2,3 | 4 on four hosts; 1 | 2,3 on three):
  connections inside a group are made, across groups they time out (no
  refusal, no unreachable error), and after heal every pair connects again.

Exit 0 when all hold, 1 otherwise; every check prints one line.
"""
import ctypes
import errno
import os
import socket
import struct
import subprocess
import sys
import time

CLONE_NEWNET = 0x40000000
PORT = 47311
libc = ctypes.CDLL(None, use_errno=True)
failures = 0


def check(ok, what):
    global failures
    print(("ok   " if ok else "FAIL ") + what, flush=True)
    if not ok:
        failures += 1


def load(d):
    conf = {}
    with open(os.path.join(d, "cluster")) as f:
        for line in f:
            k, _, v = line.strip().partition("=")
            conf[k] = v
    return conf


class Cluster:
    def __init__(self, d):
        self.dir = d
        c = load(d)
        self.prefix, self.n, self.net = c["PREFIX"], int(c["N"]), c["NET"]
        self.home = os.open("/proc/self/ns/net", os.O_RDONLY)
        self.listeners = {}

    def addr(self, i):
        return "%s.%d" % (self.net, i)

    def enter(self, i):
        fd = os.open("/run/netns/%s-h%d" % (self.prefix, i), os.O_RDONLY)
        try:
            if libc.setns(fd, CLONE_NEWNET) != 0:
                raise OSError(ctypes.get_errno(), "setns")
        finally:
            os.close(fd)

    def leave(self):
        if libc.setns(self.home, CLONE_NEWNET) != 0:
            raise OSError(ctypes.get_errno(), "setns")

    def socket_in(self, i):
        self.enter(i)
        try:
            return socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        finally:
            self.leave()

    def listen_all(self):
        for i in range(1, self.n + 1):
            s = self.socket_in(i)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind((self.addr(i), PORT))
            s.listen(64)
            s.settimeout(2)
            self.listeners[i] = s

    def connect(self, a, b, timeout):
        """A connection from host a to host b: (client, server side) or the error."""
        c = self.socket_in(a)
        c.settimeout(timeout)
        try:
            c.connect((self.addr(b), PORT))
        except OSError as e:
            c.close()
            return None, e
        srv, _ = self.listeners[b].accept()
        return (c, srv), None

    def harness(self, *args):
        subprocess.run([os.path.join(os.path.dirname(os.path.abspath(__file__)), "netns.sh"),
                        self.dir] + list(args), check=True)


def silent(s):
    """Whether a socket has seen nothing from its peer: no error, no EOF, nothing to read."""
    s.settimeout(None)
    err = s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
    if err != 0:
        return "error %s" % os.strerror(err)
    try:
        data = s.recv(1, socket.MSG_DONTWAIT | socket.MSG_PEEK)
        return "EOF" if data == b"" else "data"
    except BlockingIOError:
        return None
    except OSError as e:
        return "error %s" % e.strerror


def total_retrans(s):
    info = s.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 104)
    return struct.unpack_from("I", info, 100)[0]


def recv_exactly(s, n, timeout):
    s.settimeout(timeout)
    got = b""
    try:
        while len(got) < n:
            chunk = s.recv(n - len(got))
            if not chunk:
                break
            got += chunk
    except OSError:
        pass
    return got


def pairs(cl, groups=None):
    """Every ordered pair connects inside a group and times out across."""
    group_of = {}
    for g, members in enumerate(groups or [list(range(1, cl.n + 1))]):
        for h in members:
            group_of[h] = g
    bad = []
    for a in range(1, cl.n + 1):
        for b in range(1, cl.n + 1):
            if a == b:
                continue
            same = group_of.get(a, -1) == group_of.get(b, -1)
            conn, err = cl.connect(a, b, 2 if same else 1)
            if conn:
                conn[0].close()
                conn[1].close()
            if same and conn is None:
                bad.append("%d->%d: %s" % (a, b, err))
            if not same and (conn is not None or not isinstance(err, socket.timeout)):
                bad.append("%d->%d: %s" % (a, b, "connected" if conn else err))
    return bad


def main():
    cl = Cluster(sys.argv[1])
    cl.listen_all()
    bad = pairs(cl)
    check(not bad, "every host reaches every other (%d hosts) %s" % (cl.n, " ".join(bad)))

    (a, b), err = cl.connect(1, 2, 2)
    a.sendall(b"hello")
    check(recv_exactly(b, 5, 2) == b"hello", "a connection from host 1 to host 2 carries data")
    cl.harness("linkdown", "2")
    t0 = time.monotonic()
    a.sendall(b"x" * 1000)
    b.sendall(b"y" * 1000)
    time.sleep(3)
    sa, sb = silent(a), silent(b)
    check(sa is None and sb is None,
          "link of host 2 down 3 s: both ends silent, no FIN, RST or error (host 1: %s, host 2: %s)"
          % (sa or "silent", sb or "silent"))
    check(total_retrans(a) > 0 and total_retrans(b) > 0,
          "... and both ends retransmit (%d, %d)" % (total_retrans(a), total_retrans(b)))
    conn, err = cl.connect(1, 2, 1)
    check(conn is None and isinstance(err, socket.timeout),
          "... a new connection to host 2 times out (%s)" % err)
    cl.harness("linkup", "2")
    gb, ga = recv_exactly(b, 1000, 15), recv_exactly(a, 1000, 15)
    check(gb == b"x" * 1000 and ga == b"y" * 1000,
          "link up: the same connection delivers what was sent while down, both ways (%.1f s)"
          % (time.monotonic() - t0))
    a.close()
    b.close()

    if cl.n >= 4:
        splits = [[[1, 2], [3, 4]], [[1, 2, 3], [4]]]
    else:
        splits = [[[1], list(range(2, cl.n + 1))]]
    for groups in splits:
        text = " | ".join(",".join(map(str, g)) for g in groups)
        cl.harness("partition", *[",".join(map(str, g)) for g in groups])
        bad = pairs(cl, groups)
        check(not bad, "partition %s: inside groups connected, across timed out %s"
              % (text, " ".join(bad)))
    cl.harness("heal")
    bad = pairs(cl)
    check(not bad, "healed: every host reaches every other again %s" % " ".join(bad))
    print("selftest: %s" % ("FAILED" if failures else "passed"))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
