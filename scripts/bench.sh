#!/bin/sh
# SPDX-License-Identifier: MIT
# bench.sh: `make bench`: ftbench (ftcc allreduce) over 4 KiB..256 MiB for 2 and 4 ranks into bench-results/.
#
# usage: scripts/bench.sh BUILD_DIR
# env:   FTCC_BENCH_FULL=1     also 8 ranks
#        FTCC_BENCH_RANKS      world sizes (overrides the above), e.g. "2 4 8"
#        FTCC_BENCH_MIN/MAX    size range (default 4K / 256M)
#        FTCC_BENCH_ARGS       extra ftbench flags, e.g. "--check --iters 20"
#        FTCC_BENCH_OUT        output directory (default bench-results)
#        FTCC_BENCH_TIMEOUT    seconds per world size (default 1800)
# Writes OUT/ftbench.csv (impl,transport,ranks,bytes,median_us,algbw_GBps,busbw_GBps),
# OUT/ftbench-nN.txt (each run's table) and prints a busbw summary per size.
set -eu

B=${1:?usage: scripts/bench.sh BUILD_DIR}
OUT=${FTCC_BENCH_OUT:-bench-results}
MIN=${FTCC_BENCH_MIN:-4K}
MAX=${FTCC_BENCH_MAX:-256M}
TMO=${FTCC_BENCH_TIMEOUT:-1800}
if [ -n "${FTCC_BENCH_RANKS:-}" ]; then
	RANKS=$FTCC_BENCH_RANKS
elif [ "${FTCC_BENCH_FULL:-0}" = 1 ]; then
	RANKS="2 4 8"
else
	RANKS="2 4"
fi

for f in "$B/ftcc-run" "$B/ftbench"; do
	[ -x "$f" ] || { echo "bench: $f missing; run make first" >&2; exit 1; }
done
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
CSV=$OUT/ftbench.csv
: >"$CSV"

status=0
for n in $RANKS; do
	echo "== ftbench: $n ranks, $MIN..$MAX, transport ${FTCC_TRANSPORT:-tcp}"
	# POSIX sh has no pipefail: carry the launcher's status out of the pipe in a file.
	rcfile=$(mktemp)
	# shellcheck disable=SC2086
	{
		rc=0
		timeout "$TMO" "$B/ftcc-run" -n "$n" "$B/ftbench" --min "$MIN" --max "$MAX" \
			--csv "$CSV" ${FTCC_BENCH_ARGS:-} 2>&1 || rc=$?
		echo "$rc" >"$rcfile"
	} | tee "$OUT/ftbench-n$n.txt"
	rc=$(cat "$rcfile")
	rm -f "$rcfile"
	if [ "$rc" -ne 0 ]; then
		echo "bench: ftbench with $n ranks failed (status $rc)" >&2
		status=1
	fi
done

echo
echo "== busbw (GB/s) by size and world size: $CSV"
python3 - "$CSV" <<'EOF'
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
if not rows:
    print("(no results)")
    sys.exit(0)
def human(b):
    for s, u in ((30, "G"), (20, "M"), (10, "K")):
        if b >= 1 << s and b % (1 << s) == 0:
            return "%d%s" % (b >> s, u)
    return str(b)
ranks = sorted({int(r["ranks"]) for r in rows})
sizes = sorted({int(r["bytes"]) for r in rows})
val = {(int(r["ranks"]), int(r["bytes"])): r for r in rows}
print("%8s" % "size" + "".join("  %10s %10s" % ("n=%d us" % n, "busbw") for n in ranks))
for b in sizes:
    line = "%8s" % human(b)
    for n in ranks:
        r = val.get((n, b))
        line += "  %10s %10s" % ((r["median_us"], "%.3f" % float(r["busbw_GBps"])) if r else ("-", "-"))
    print(line)
EOF
exit $status
