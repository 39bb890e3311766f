#!/bin/sh
# SPDX-License-Identifier: MIT
# plot-bench.sh: draw busbw vs message size per implementation from benchmark CSVs into PNGs with gnuplot.
#
# usage: scripts/plot-bench.sh [CSV...]
#   default CSVs: bench-results/compare.csv and bench-results/ftbench.csv (those that exist).
#   Each CSV ([coll,]impl,transport,ranks,bytes,median_us,algbw_GBps,busbw_GBps) gives one
#   PNG per collective and world size, next to the CSV: <name>-n<ranks>.png for allreduce,
#   <name>-<coll>-n<ranks>.png for the others, one line per impl.
set -eu

command -v gnuplot >/dev/null || { echo "plot-bench: gnuplot not found (apt-get install gnuplot-nox)" >&2; exit 1; }
if [ $# -eq 0 ]; then
	for f in bench-results/compare.csv bench-results/ftbench.csv; do
		[ -f "$f" ] && set -- "$@" "$f"
	done
	[ $# -gt 0 ] || { echo "plot-bench: no CSV given and none in bench-results/" >&2; exit 1; }
fi
if echo 'set terminal' | gnuplot 2>&1 | grep -q pngcairo; then
	TERM_SPEC="pngcairo size 1000,600 font 'sans,10'"
else
	TERM_SPEC="png size 1000,600"
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT INT TERM

for csv in "$@"; do
	base=${csv%.csv}
	# Split into one data file per (ranks, impl) and list them as "ranks impl file".
	python3 - "$csv" "$tmp" >"$tmp/index" <<'EOF'
import csv, os, sys
src, tmp = sys.argv[1], sys.argv[2]
data = {}
for r in csv.DictReader(open(src)):
    coll = r.get("coll") or "allreduce"
    data.setdefault((coll, int(r["ranks"]), r["impl"]), []).append(
        (int(r["bytes"]), float(r["busbw_GBps"]), float(r["median_us"])))
for i, ((coll, n, impl), pts) in enumerate(sorted(data.items())):
    path = os.path.join(tmp, "d%d.dat" % i)
    with open(path, "w") as f:
        for b, bw, us in sorted(pts):
            f.write("%d %.6f %.3f\n" % (b, bw, us))
    print("%s-n%d" % (coll, n), impl, path)
EOF
	awk '{ print $1 }' "$tmp/index" | sort -u | while read -r cn; do
		coll=${cn%-n*} n=${cn##*-n}
		if [ "$coll" = allreduce ]; then png=$base-n$n.png; else png=$base-$coll-n$n.png; fi
		plots=$(awk -v k="$cn" '$1 == k { printf "%s\"%s\" using 1:2 with linespoints title \"%s\"", sep, $3, $2; sep = ", " }' "$tmp/index")
		gnuplot <<EOF
set terminal $TERM_SPEC
set output "$png"
set title "$coll bus bandwidth, $n ranks ($(basename "$csv"))"
set xlabel "message size (bytes)"
set ylabel "busbw (GB/s)"
set logscale x 2
set format x "%.0b%B"
set key left top
set grid
plot $plots
EOF
		echo "plot-bench: $png"
	done
done
