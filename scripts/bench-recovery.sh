#!/bin/sh
# bench-recovery.sh: `make bench-recovery`: what a failure costs and what the shrink policy costs when nothing fails.
#
# usage: scripts/bench-recovery.sh BUILD_DIR
# env:   FTCC_RECOVERY_TRIALS   trials per row (default 10)
#        FTCC_OVERHEAD_ROUNDS   interleaved abort/shrink rounds (default 15; 4 KiB times are bimodal here)
# 1. Overhead: ftbench under FTCC_POLICY=abort (the vanilla ring) and =shrink
#    (detector, commit steps or kept results, the in-place input saved)
#    back to back, ROUNDS times, in place (as data-parallel trainers call it)
#    at 4 ranks 64 MiB, 4 ranks 4 KiB and 2 ranks 4 KiB, and out of place at
#    4 ranks 64 MiB; median of the per-round medians.
# 2. Failures: recovery_bench kills (SIGKILL) or stops (SIGSTOP) a random
#    rank; prints the time to every survivor knowing and to the interrupted
#    op returning on every survivor.
set -eu
B=${1:?usage: scripts/bench-recovery.sh BUILD_DIR}
T=${FTCC_RECOVERY_TRIALS:-10}
R=${FTCC_OVERHEAD_ROUNDS:-15}

median() { sort -g | awk '{v[NR]=$1} END {if (NR==0) print "nan"; else if (NR%2) print v[(NR+1)/2]; else print (v[NR/2]+v[NR/2+1])/2}'; }

# one ftbench run at one size: prints its median µs
one() { # policy ranks size placement
	iters=$([ "$3" = 4K ] && echo 5000 || echo 0)
	place=$([ "$4" = in ] && echo --in-place || echo)
	# shellcheck disable=SC2086
	FTCC_POLICY=$1 timeout 600 "$B/ftcc-run" -n "$2" "$B/ftbench" --min "$3" --max "$3" --iters "$iters" $place 2>&1 |
		awk '$1 == "[0]" && $2 !~ /^#/ && NF >= 5 {print $5; exit}'
}

echo "== cost when nothing fails: shrink / abort, $R interleaved rounds (median of medians, µs)"
echo "| ranks | size | placement | abort µs | shrink µs | shrink/abort |"
echo "|---|---|---|---|---|---|"
for cfg in "4 64M in" "4 4K in" "2 4K in" "4 64M out"; do
	set -- $cfg
	a=$(mktemp); s=$(mktemp)
	i=0
	while [ $i -lt "$R" ]; do
		one abort "$1" "$2" "$3" >>"$a"
		one shrink "$1" "$2" "$3" >>"$s"
		i=$((i + 1))
	done
	ma=$(median <"$a"); ms=$(median <"$s")
	echo "| $1 | $2 | $3 place | $ma | $ms | $(awk -v x="$ms" -v y="$ma" 'BEGIN {printf "%.3f", x / y}') |"
	rm -f "$a" "$s"
done

echo
echo "== failures: $T trials per row (times from the signal, CLOCK_MONOTONIC)"
"$B/recovery_bench" -n 8 -s 4096 -t "$T"
"$B/recovery_bench" -n 8 -s 67108864 -t "$T" | tail -n 1
"$B/recovery_bench" -n 4 -s 67108864 -t "$T" | tail -n 1
"$B/recovery_bench" -n 4 -s 4096 -t "$T" | tail -n 1
echo
echo "== a hung rank (SIGSTOP): detection timeout 1000 ms, heartbeat 100 ms"
"$B/recovery_bench" -n 8 -s 4096 -t "$T" --stop --detect-ms 1000 --heartbeat-ms 100
