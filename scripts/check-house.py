#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""check-house.py [ROOT]: the library's structure, drawn from its sources' calls.

- Rooms: lib/ holds only init.c and folders (rooms); each room calls only
  rooms below it, in the order of ROOMS (init.c above all, util at the
  bottom). An arrow up is a failure and is named with the calls that make it.
- Circles: no set of more than two files in lib/ that call each other
  round (Tarjan's strongly connected components of the calls); circles
  among the transports' files are printed, not failed (the fabric
  transport's parts still call each other round).
- Size: no source file over 1,000 lines in lib/, transports/ or tools/.
A call is a name ft_* or ft__* defined (not static) in one file and called
in another; comments are left out.
"""
import collections
import glob
import os
import re
import sys

ROOT = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..")
ROOMS = ["init", "policy", "durable", "core", "membership", "bootstrap", "transports", "util"]
MAX_LINES = 1000
DEF = re.compile(r"^(?:static\s+)?[A-Za-z_][\w \*]*?\b(ft_?_?\w+)\s*\([^;]*?\)\s*\{", re.M)
CALL = re.compile(r"\b(ft_?_?\w+)\s*\(")


def rel(f):
    return os.path.relpath(f, ROOT)


def room(f):
    parts = rel(f).split("/")
    if parts[0] == "transports":
        return "transports"
    return parts[1] if len(parts) > 2 else "init"


def strip_comments(src):
    return re.sub(r"/\*.*?\*/", "", src, flags=re.S)


def main():
    bad = []
    files = sorted(glob.glob(f"{ROOT}/lib/**/*.c", recursive=True) +
                   glob.glob(f"{ROOT}/transports/**/*.c", recursive=True))
    for f in sorted(glob.glob(f"{ROOT}/lib/*")):
        if os.path.isfile(f) and os.path.basename(f) != "init.c":
            bad.append(f"{rel(f)}: lib/ holds init.c and rooms only")
    for f in files:
        if room(f) not in ROOMS:
            bad.append(f"{rel(f)}: room {room(f)} is not in check-house.py's order")
    defs = {}
    for f in files:
        src = open(f).read()
        for m in DEF.finditer(src):
            if not src[m.start():m.end()].startswith("static"):
                defs.setdefault(m.group(1), f)
    edges = collections.defaultdict(set)
    up = collections.defaultdict(set)
    for f in files:
        for name in set(CALL.findall(strip_comments(open(f).read()))):
            g = defs.get(name)
            if g is None or g == f:
                continue
            edges[f].add(g)
            a, b = room(f), room(g)
            if a in ROOMS and b in ROOMS and ROOMS.index(b) < ROOMS.index(a):
                up[(a, b)].add(f"{rel(f)} calls {name}")
    for (a, b), calls in sorted(up.items()):
        bad.append(f"{a} calls up into {b}: " + "; ".join(sorted(calls)))
    # Tarjan, iteratively
    index, low, stack, on, comps, counter = {}, {}, [], set(), [], [0]
    for v0 in files:
        if v0 in index:
            continue
        work = [(v0, iter(sorted(edges[v0])))]
        index[v0] = low[v0] = counter[0]; counter[0] += 1; stack.append(v0); on.add(v0)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = counter[0]; counter[0] += 1; stack.append(w); on.add(w)
                    work.append((w, iter(sorted(edges[w]))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop(); on.discard(w); comp.append(w)
                    if w == v:
                        break
                comps.append(comp)
    circles = [sorted(rel(f) for f in c) for c in comps if len(c) > 1]
    for c in circles:
        if len(c) > 2 and c[0].startswith("lib/"):
            bad.append(f"a circle of {len(c)} files: {' '.join(c)}")
        elif len(c) > 2:
            print(f"check-house: (not failed) a circle of {len(c)} files: {' '.join(c)}")
    sources = files + sorted(glob.glob(f"{ROOT}/tools/*.c"))
    for f in sources:
        n = sum(1 for _ in open(f))
        if n > MAX_LINES:
            bad.append(f"{rel(f)}: {n} lines (at most {MAX_LINES})")
    for b in bad:
        print(f"check-house: {b}")
    if bad:
        return 1
    print(f"check-house: {len(files)} sources in rooms {' > '.join(ROOMS)}; no call up; "
          f"circles of two: {', '.join('+'.join(os.path.basename(x) for x in c) for c in circles if len(c) == 2) or 'none'}"
          f" (none larger in lib/); no source over {MAX_LINES} lines")
    return 0


if __name__ == "__main__":
    sys.exit(main())
