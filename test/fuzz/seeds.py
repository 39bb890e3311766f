#!/usr/bin/env python3
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


# ---- ckpt: journal records (lib/ckpt.h) ----
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


def main():
    top = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "corpus")
    ckpt(os.path.join(top, "ckpt"))


main()
