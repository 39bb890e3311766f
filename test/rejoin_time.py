#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""rejoin_time.py KILL_MS SURVIVOR_TRACE... -- NEWCOMER_TRACE...: how long
after a kill (KILL_MS, wall clock in ms) the interrupted op returned on
every rank. The interrupted op is the first op the survivors ran in a later
generation than the job's first (it began before the kill and ran again on
the view that took the newcomers back); it returned on a survivor at its
event's end, and on a newcomer at the end of its first op (a newcomer
joins at that op, or runs the op after it once a survivor handed it the
state). Prints "interrupted op N returned on every rank T ms after the
kill (survivors: A ms, newcomers: B ms)". Traces are FTCC_TRACE files
(README, "Trace"); a killed rank's may be unterminated."""
import json
import sys


def events(path):
    text = open(path).read().rstrip().rstrip(",")
    if not text.endswith("]"):
        text += "]"
    return [e for e in json.loads(text) if e.get("cat") == "op"]


def main():
    if "--" not in sys.argv[2:]:
        sys.exit("usage: rejoin_time.py KILL_MS SURVIVOR_TRACE... -- NEWCOMER_TRACE...")
    cut = sys.argv.index("--")
    kill_us = int(sys.argv[1]) * 1000
    survivors, newcomers = sys.argv[2:cut], sys.argv[cut + 1:]
    if not survivors or not newcomers:
        sys.exit("rejoin_time.py: a survivor's and a newcomer's trace are both needed")
    seq, ends = None, []
    for path in survivors:
        later = [e for e in events(path) if e["args"]["generation"] > 0 and e["args"]["rc"] == 0]
        if not later:
            sys.exit(f"rejoin_time.py: {path} has no op after the failure")
        first = min(later, key=lambda e: e["args"]["op_seq"])
        if seq is not None and first["args"]["op_seq"] != seq:
            sys.exit(f"rejoin_time.py: survivors disagree on the interrupted op ({seq}, "
                     f"{first['args']['op_seq']} in {path})")
        seq = first["args"]["op_seq"]
        ends.append(first["ts"] + first["dur"])
    new_ends = []
    for path in newcomers:
        ops = [e for e in events(path) if e["args"]["rc"] == 0]
        if not ops:
            sys.exit(f"rejoin_time.py: {path} has no op")
        new_ends.append(min(ops, key=lambda e: e["ts"])["ts"] + min(ops, key=lambda e: e["ts"])["dur"])
    a = (max(ends) - kill_us) / 1000
    b = (max(new_ends) - kill_us) / 1000
    print(f"interrupted op {seq} returned on every rank {max(a, b):.0f} ms after the kill "
          f"(survivors: {a:.0f} ms, newcomers: {b:.0f} ms)")


main()
