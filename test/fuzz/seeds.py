#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
# seeds.py: writes the small hand-made seeds of test/fuzz/corpus/<name>/ (all but log's, which gen_corpus.c makes from the writer).
import os
import struct
import sys


def crc32c(data, crc=0):
    crc ^= 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def put(d, name, data):
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


# ---- ckpt: journal records (lib/durable/ckpt.h) ----
CJ_MAGIC = 0x4A435446


def cj_rec(typ, body, rnd=0, step=0, count=0, nres=0):
    ln = 48 + len(body)
    h = struct.pack("<IHHIIQQQQ", CJ_MAGIC, 1, typ, ln, 0, rnd, step, count, nres)
    crc = crc32c(body, crc32c(h))
    return struct.pack("<IHHIIQQQQ", CJ_MAGIC, 1, typ, ln, crc, rnd, step, count, nres) + body


def ckpt(d):
    regions = [(0, 1, 10000, 3), (2, 6, 8192, 2)]  # index, dtype, bytes, nblocks (4096-byte blocks)
    head = struct.pack("<QQiiQIIdQQ", 0x1234, 0x5678, 0, 2, 4096, 0, 1, 1.0, 18192, 7)
    for r in regions:
        head += struct.pack("<IIQQ", *r)
    hd = cj_rec(1, head, count=len(regions))
    nb = 5
    put(d, "head-only", hd)
    c1 = cj_rec(2, struct.pack("<IIQ", 0, 0, 0) + struct.pack("<IIQ", 1, 1, 1), 1, 10, 2)
    c2 = cj_rec(2, struct.pack("<IIQ", 0, 1, 2) + struct.pack("<ffffff", 0, 1, 2, 3, 4, 0), 2, 20, 1, nb)
    put(d, "commits", hd + c1 + c2)
    snap = b"".join(struct.pack("<QQQQ", i % 3, 0, i, 0) for i in range(nb))
    put(d, "snap", hd + cj_rec(3, snap + struct.pack("<ffffff", 1, 2, 3, 4, 5, 0), 3, 30, nb, nb))
    put(d, "torn", (hd + c1 + c2)[:-7])


# ---- frame: tag byte then struct ft__frame / ft__hello / ft__hello_ack (transports/transport.h) ----
def frame(d):
    good = struct.pack("<IHBBIBBHQQiIIIQQiI", 0x46544346, 1, 1, 3, 3, 0, 1, 0, 42, 1000, -1, 2, 1,
                       0, 2000, 1000, 0, 0)
    abort_ = struct.pack("<IHBBIBBHQQiIIIQQiI", 0x46544346, 2, 0, 0, 3, 0, 0, 0, 0, 0, 0, 0, 0,
                         0, 0, 0, -(4096 + 2), 0)
    hello = struct.pack("<IHHIiiIII", 0x46544348, 4, 1, 3, 1, 2, 0, 0, 0) + b"fuzz-job".ljust(128, b"\0")
    hello += bytes(range(16)) + bytes(32)
    ack = struct.pack("<Ii", 0x46544348, 0) + bytes(32)
    busy = struct.pack("<Ii", 0x46544348, -16) + bytes(32)
    put(d, "data-frame", b"\0" + good)
    put(d, "abort-frame", b"\0" + abort_)
    put(d, "hello-sealed", b"\2" + hello)
    put(d, "stream", b"\4" + ack + b"\0" + good + b"\4" + busy + b"\1" + hello)


# ---- ctl: mode byte then control messages (lib/membership/ctl.c) ----
def ctl_msg(typ, body, gen=4, frm=5):
    return struct.pack("<IHHIi", 0x6C637466, typ, len(body), gen, frm) + body


def ctl(d):
    hello = b"fuzz-job".ljust(128, b"\0") + struct.pack("<ii", 2, 0) + bytes(range(16)) + bytes(32)
    ack = struct.pack("<iI", 0, 0) + bytes(32)
    rest = ctl_msg(2, b"") + ctl_msg(3, struct.pack("<ii", 1, 3)) + ctl_msg(16, struct.pack("<Q", 1 << 16 | 5))
    put(d, "stranger-hello", b"\2" + ctl_msg(1, hello) + rest + ctl_msg(4, b""))
    put(d, "ours-ack", b"\3" + ctl_msg(5, ack) + rest)
    put(d, "stranger-junk", b"\0" + ctl_msg(2, b"") + rest)
    # ft__ctl_next returned an ACK the link did not await (the fuzzer's find)
    put(d, "regress-ack-after-hello", b"\2" + ctl_msg(1, hello) + ctl_msg(5, b""))
    put(d, "regress-second-ack", b"\3" + ctl_msg(5, ack) + ctl_msg(2, b"") + ctl_msg(5, ack))
    put(d, "refused-ack", b"\3" + ctl_msg(5, struct.pack("<iI", -(4096 + 6), 0) + bytes(32)))


# ---- store: mode byte then a join, or the store's bytes (lib/bootstrap/boot_store.h) ----
def store(d):
    job, entry = b"fuzz-job", b"host-1:4000"
    join = struct.pack(">IHHIIHH", 0x46544253, 3, 1, 1, 3, len(job), len(entry)) + bytes(range(16)) + job + entry
    put(d, "join", b"\1" + join + bytes(32))
    # a NUL in the job id passed ft__store_job_check (strchr finds the NUL): the fuzzer's find
    nul = struct.pack(">IHHIIHH", 0x46544253, 3, 1, 1, 3, 8, len(entry)) + bytes(16) + b"fuzz\0job" [:8] + entry
    put(d, "regress-nul-in-job", b"\1" + nul + bytes(32))
    put(d, "join-torn", b"\1" + join[:30])
    body = b"".join(bytes([len(e)]) + e for e in (b"a:1", b"h:1", b"[::1]:3"))
    book = struct.pack(">IHHII", 0x46544253, 3, 2, 3, len(body)) + body + bytes(32)
    put(d, "book", bytes([2 | 2 << 2 | 1 << 4]) + book)
    why = b"rank 1 is held by a live connection"
    put(d, "refused", bytes([2 | 2 << 2 | 1 << 4]) + struct.pack(">IHHII", 0x46544253, 3, 3, 16, len(why)) + why + bytes(32))
    put(d, "no-challenge", bytes([0]) + book)


# ---- memberfile: which file and world size, then its text (lib/membership/member_file.c) ----
def memberfile(d):
    put(d, "view", bytes([0 | 2 << 2]) + b"ftcc-view 2 gen 0 size 3 writer 1 somehost nonce 5eed first 0 members 0 1 3\n")
    put(d, "member", bytes([1 | 2 << 2]) + b"h:1 1 somehost c:2 5\n")
    put(d, "member-back", bytes([1 | 2 << 2]) + b"h:1 2 somehost - 5 1\n")
    put(d, "left", bytes([2 | 2 << 2]) + b"1 5 5eed\n")


# ---- inband: state bytes then messages (test/fuzz/fuzz_inband.c, lib/membership/member_inband.c) ----
COMMITTED = (1 << 64) - 1


def ib_str(s):
    return struct.pack("<H", len(s)) + s


def ib_value(ballot, members, nonce=0xFEED, first=0):
    v = struct.pack("<QQQi", ballot, first, nonce, len(members))
    v += b"".join(struct.pack("<i", m) for m in members)
    return v + b"".join(struct.pack("<Q", 5) for _ in members)


def ib_msg(typ, frm, gen, body):
    return bytes([typ, frm + 1, gen]) + struct.pack("<H", len(body)) + body


def ib_record(ballot, world, kind=0, value=b"", certain=0):
    r = struct.pack("<QQ", ballot, 9) + ib_str(b"h:9") + ib_str(b"c:9")
    r += certain.to_bytes((world + 7) // 8, "little") + struct.pack("<i", kind)
    return r + value


def inband(d):
    COLLECT, RECORD, PROPOSE, ACCEPT, NACK, BOOK, COMMIT, NOQUORUM = range(8)
    w = 4
    book = struct.pack("<i", w) + b"".join(struct.pack("<i", r) + ib_str(b"h:%d" % (r + 1)) + ib_str(b"c:1") for r in range(w))
    b0 = 1 << 16
    start = bytes([w - 2, 1, 0, 1 | 2, 0, 0])
    put(d, "gen0-acceptor", start + ib_msg(BOOK, 0, 1, book) + ib_msg(COLLECT, 0, 1, struct.pack("<Q", b0))
        + ib_msg(PROPOSE, 0, 1, ib_value(b0, list(range(w)))) + ib_msg(COMMIT, 0, 1, ib_value(b0, list(range(w)))))
    coord = bytes([w - 2, 0, 1, 1 | 2 | 1 << 2, 2, 0])
    b2 = 2 << 16
    put(d, "gen1-coordinator", coord + ib_msg(RECORD, 1, 1, ib_record(b2, w))
        + ib_msg(RECORD, 2, 1, ib_record(b2, w, 1, ib_value(1 << 16 | 3, [0, 1, 2]), certain=8))
        + ib_msg(RECORD, 3, 1, ib_record(b2, w, 2, ib_value(COMMITTED, [0, 1, 2])))
        + ib_msg(NACK, 1, 1, struct.pack("<Q", 3 << 16 | 1)))
    phase2 = bytes([w - 2, 0, 1, 1 | 2 | 2 << 2, 2, 0])
    put(d, "gen1-accepts", phase2 + ib_msg(ACCEPT, 1, 1, struct.pack("<Q", b2)) + ib_msg(ACCEPT, 2, 1, struct.pack("<Q", b2)))
    acc = bytes([w - 2, 2, 2, 1 | 2 | 32, 0, 0])
    b3 = 3 << 16
    b3 = 3 << 16 | 1  # view 1 leaves rank 0 out (bit 5): rank 1 coordinates
    put(d, "gen2-acceptor", acc + ib_msg(COLLECT, 1, 1, struct.pack("<Q", b3))
        + ib_msg(PROPOSE, 1, 1, ib_value(b3, [1, 2])) + ib_msg(NOQUORUM, 1, 1, struct.pack("<Q", b3))
        + ib_msg(COMMIT, 1, 1, ib_value(b3, [1, 2])) + ib_msg(COMMIT, 1, 2, ib_value(COMMITTED, [1, 2]))
        + ib_msg(COLLECT, 0, 0, struct.pack("<Q", 2 << 16)) + ib_msg(COLLECT, 3, 2, struct.pack("<Q", 4 << 16 | 3)))


def main():
    top = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "corpus")
    ckpt(os.path.join(top, "ckpt"))
    frame(os.path.join(top, "frame"))
    ctl(os.path.join(top, "ctl"))
    store(os.path.join(top, "store"))
    memberfile(os.path.join(top, "memberfile"))
    inband(os.path.join(top, "inband"))


main()
