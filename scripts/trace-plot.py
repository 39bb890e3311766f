#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""trace-plot.py: draw FTCC_TRACE files (one per rank) as a timeline PNG with gnuplot.

usage: scripts/trace-plot.py [-o OUT.png] [--width PX] TRACE|GLOB...
  e.g. scripts/trace-plot.py -o job.png 'trace.*.json'

One row per rank (its original rank): collectives as bars coloured by kind,
recoveries as bars on top of them, failures a rank's detector declared and
the views it settled as markers, and a cross where a rank's trace ends
without ft_finalize (killed). Time is seconds since the earliest event of
all files (the files use CLOCK_REALTIME microseconds, so ranks line up).
A file cut short by a killed rank (an array left open) is read as far as
it goes. Needs gnuplot (Debian: gnuplot-nox); installs nothing.
"""
import argparse
import glob
import json
import os
import shutil
import subprocess
import sys

OPS = [("allreduce", "#4e79a7"), ("broadcast", "#59a14f"), ("barrier", "#b07aa1"),
       ("invalid", "#bab0ac")]


def load(path):
    """The events of one trace file, also when its array was never closed."""
    with open(path) as f:
        text = f.read()
    try:
        return json.loads(text)
    except ValueError:
        pass
    # one event per line: keep every whole line that parses
    events = []
    for line in text.splitlines():
        line = line.strip().rstrip(",")
        if line.startswith("{"):
            try:
                events.append(json.loads(line))
            except ValueError:
                break
    return events


def main():
    ap = argparse.ArgumentParser(description="FTCC_TRACE files to a timeline PNG (gnuplot)")
    ap.add_argument("traces", nargs="+", help="trace files or globs (quote them)")
    ap.add_argument("-o", "--output", default="trace.png", help="PNG to write (trace.png)")
    ap.add_argument("--width", type=int, default=1400, help="image width in pixels")
    args = ap.parse_args()

    gnuplot = shutil.which("gnuplot")
    if gnuplot is None:
        sys.exit("trace-plot: gnuplot not found (Debian: apt-get install gnuplot-nox, "
                 "or make deps)")
    files = []
    for pat in args.traces:
        hits = sorted(glob.glob(pat))
        if not hits and os.path.exists(pat):
            hits = [pat]
        if not hits:
            sys.exit("trace-plot: no file matches %s" % pat)
        files += [h for h in hits if h not in files]

    events = []
    ended = {}      # rank -> whether its trace reached ft_finalize
    last_ts = {}
    for path in files:
        try:
            evs = load(path)
        except OSError as e:
            sys.exit("trace-plot: %s: %s" % (path, e))
        for e in evs:
            if not isinstance(e, dict) or "ts" not in e or e.get("ph") == "M":
                continue
            pid = e.get("pid", 0)
            events.append(e)
            end = e["ts"] + e.get("dur", 0)
            last_ts[pid] = max(last_ts.get(pid, end), end)
            if e.get("name") == "finalize":
                ended[pid] = True
            ended.setdefault(pid, False)
    if not events:
        sys.exit("trace-plot: no events in %s" % " ".join(files))
    t0 = min(e["ts"] for e in events)
    ranks = sorted(last_ts)

    def sec(us):
        return (us - t0) / 1e6

    span = max(sec(t) for t in last_ts.values())
    # a recovery of a few hundred microseconds would be invisible at job scale
    min_half = span / 600 if span > 0 else 1e-4
    blocks = {name: [] for name, _ in OPS}
    blocks["recovery"], blocks["failure"], blocks["view"], blocks["killed"] = [], [], [], []
    for e in events:
        name, pid, ph = e.get("name"), e.get("pid", 0), e.get("ph")
        a = e.get("args", {})
        if ph == "X" and name in blocks and name != "recovery":
            blocks[name].append("%.6f %d %.6f 0.30" % (sec(e["ts"] + e["dur"] / 2), pid,
                                                         e["dur"] / 2e6))
        elif ph == "X" and name == "recovery":
            blocks["recovery"].append("%.6f %d %.6f 0.42" % (sec(e["ts"] + e["dur"] / 2), pid,
                                                               max(e["dur"] / 2e6, min_half)))
        elif ph == "i" and name == "failure":
            blocks["failure"].append('%.6f %d "x%s"' % (sec(e["ts"]), pid, a.get("rank", "?")))
        elif ph == "i" and name == "view":
            blocks["view"].append('%.6f %d "g%s"' % (sec(e["ts"]), pid, a.get("generation", "?")))
    for pid in ranks:
        if not ended[pid]:
            blocks["killed"].append("%.6f %d" % (sec(last_ts[pid]), pid))

    script = []
    for name, rows in blocks.items():
        script.append("$%s << EOD\n%s\nEOD" % (name, "\n".join(rows) if rows else "NaN NaN NaN NaN"))
    probe = subprocess.run([gnuplot, "-e", "set terminal"], capture_output=True, text=True)
    term = ("pngcairo size %d,%d font 'sans,10'" if "pngcairo" in probe.stdout + probe.stderr
            else "png size %d,%d") % (args.width, 160 + 80 * len(ranks))
    script += [
        "set terminal " + term,
        "set output '%s'" % args.output.replace("'", "''"),
        "set title 'ftcc trace: %d ranks (%s)' noenhanced" % (
            len(ranks), os.path.basename(files[0]) + (" ..." if len(files) > 1 else "")),
        "set xlabel 'seconds since the first event'",
        "set ylabel 'rank'",
        "set yrange [%f:%f]" % (max(ranks) + 0.8, min(ranks) - 0.8),  # rank 0 on top
        "set ytics (%s)" % ", ".join('"%d" %d' % (r, r) for r in ranks),
        "set xrange [0:%f]" % (span * 1.02 if span > 0 else 1),
        "set grid xtics",
        "set key outside right top",
        "set style fill solid 1.0 noborder",
    ]
    plots = []
    for name, colour in OPS:
        if blocks[name]:
            plots.append("$%s using 1:2:3:4 with boxxyerror lc rgb '%s' title '%s'"
                         % (name, colour, name))
    plots += [
        "$recovery using 1:2:3:4 with boxxyerror fs transparent solid 0.6 lc rgb '#f28e2b' "
        "title 'recovery'",
        "$failure using 1:($2-0.42) with points pt 11 ps 1.6 lc rgb '#e15759' "
        "title 'failure detected'",
        "$failure using 1:($2-0.42):3 with labels offset 0,0.9 font ',8' tc rgb '#e15759' "
        "notitle",
        "$view using 1:($2+0.42) with points pt 9 ps 1.6 lc rgb '#000000' title 'view settled'",
        "$view using 1:($2+0.42):3 with labels offset 0,-0.9 font ',8' notitle",
        "$killed using 1:2 with points pt 2 ps 3 lw 3 lc rgb '#d00000' "
        "title 'trace ends without finalize'",
    ]
    script.append("plot " + ", \\\n     ".join(plots))
    run = subprocess.run([gnuplot], input="\n".join(script) + "\n", capture_output=True,
                         text=True)
    if run.returncode != 0:
        sys.exit("trace-plot: gnuplot failed:\n" + run.stderr)
    n_ops = sum(len(blocks[n]) for n, _ in OPS)
    print("trace-plot: %s (%d ranks, %d ops, %d recoveries, %d failures seen, %d views)"
          % (args.output, len(ranks), n_ops, len(blocks["recovery"]), len(blocks["failure"]),
             len(blocks["view"])))


if __name__ == "__main__":
    main()
