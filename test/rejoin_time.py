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
kill (survivors: A ms, newcomers: B ms); one op: O ms; ...", O the
median duration of the survivors' ops before the kill (the issue's bar is
T <= 1000 + O), then when the newcomers' ft_init began, when they asked
back and when they were back (the latest newcomer's, ms after the kill). Traces are FTCC_TRACE files
(docs/troubleshooting.md, "Traces"); a killed rank's may be unterminated."""
import json
import sys


def events(path, cat="op"):
    text = open(path).read().rstrip().rstrip(",")
    if not text.endswith("]"):
        text += "]"
    return [e for e in json.loads(text) if cat is None or e.get("cat") == cat]


def instant(paths, name, kill_us):
    """The latest of the newcomers' first `name` instants, in ms after the kill."""
    ts = []
    for p in paths:
        got = [e["ts"] for e in events(p, None) if e.get("name") == name]
        if got:
            ts.append(min(got))
    return f"{(max(ts) - kill_us) / 1000:.0f}" if ts else "?"


def main():
    if "--" not in sys.argv[2:]:
        sys.exit("usage: rejoin_time.py KILL_MS SURVIVOR_TRACE... -- NEWCOMER_TRACE...")
    cut = sys.argv.index("--")
    kill_us = int(sys.argv[1]) * 1000
    survivors, newcomers = sys.argv[2:cut], sys.argv[cut + 1:]
    if not survivors or not newcomers:
        sys.exit("rejoin_time.py: a survivor's and a newcomer's trace are both needed")
    seq, ends, before = None, [], []
    for path in survivors:
        before += [e["dur"] for e in events(path)
                   if e["args"]["generation"] == 0 and e["ts"] + e["dur"] < kill_us and e["args"]["op_seq"] > 0]
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
          f"(survivors: {a:.0f} ms, newcomers: {b:.0f} ms); one op: "
          f"{sorted(before)[len(before) // 2] / 1000 if before else float('nan'):.0f} ms; "
          f"the newcomers' ft_init began at {instant(newcomers, 'init', kill_us)} ms, they asked "
          f"back at {instant(newcomers, 'asks back', kill_us)} ms, were back at "
          f"{instant(newcomers, 'rejoined', kill_us)} ms")


main()
