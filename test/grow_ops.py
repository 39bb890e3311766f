#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""grow_ops.py N SURVIVOR_TRACE NEWCOMER_TRACE...: how many ops a survivor ran
short of ranks (contributors < N) that ended after the last newcomer asked
to be taken back (its first `asks back` instant), and after the last
newcomer's ft_init began (its `init` instant). Prints the two counts.
Traces are FTCC_TRACE files (docs/troubleshooting.md, "Traces"); a killed rank's may be
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

    def first(ev, what, path):
        ts = [e["ts"] for e in ev if e.get("name") == what]
        if not ts:
            sys.exit(f"grow_ops.py: {path} has no '{what}' event")
        return min(ts)

    if not news:
        sys.exit("grow_ops.py: no newcomer trace")
    if not ops:
        sys.exit(f"grow_ops.py: {sys.argv[2]} has no op")

    def short_after(what):
        start = max(first(ev, what, p) for ev, p in zip(news, sys.argv[3:]))
        return sum(1 for e in ops
                   if e["ts"] + e.get("dur", 0) > start and e["args"]["contributors"] < n)

    print(short_after("asks back"), short_after("init"))


main()
