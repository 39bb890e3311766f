#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""grow_ops.py N SURVIVOR_TRACE NEWCOMER_TRACE...: how many ops a survivor ran
short of ranks (contributors < N) that ended after the last newcomer asked
to be taken back (its first `asks back` instant), and after the last
newcomer's ft_init began (its `init` instant). Prints the two counts.
Traces are FTCC_TRACE files (README, "Trace"); a killed rank's may be
unterminated."""
import json
import sys


def events(path):
    text = open(path).read().rstrip().rstrip(",")
    if not text.endswith("]"):
        text += "]"
    return json.loads(text)


def main():
    n = int(sys.argv[1])
    ops = [e for e in events(sys.argv[2]) if e.get("cat") == "op"]
    news = [events(p) for p in sys.argv[3:]]

    def short_after(what):
        start = max(min(e["ts"] for e in ev if e.get("name") == what) for ev in news)
        return sum(1 for e in ops
                   if e["ts"] + e.get("dur", 0) > start and e["args"]["contributors"] < n)

    print(short_after("asks back"), short_after("init"))


main()
