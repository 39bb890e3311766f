#!/bin/sh
# SPDX-License-Identifier: MIT
# bench-recovery.sh: `make bench-recovery`: what a failure costs and what the shrink policy costs when nothing fails.
#
# usage: scripts/bench-recovery.sh BUILD_DIR
# env:   FTCC_RECOVERY_TRIALS   trials per row (default 10)
#        FTCC_OVERHEAD_ROUNDS   interleaved abort/shrink rounds (default 15; 4 KiB times are bimodal here)
#        FTCC_OVERHEAD_CONFIGS  the overhead rows, each "ranks size in|out [host]", separated by
#                               commas (default: every row below)
#        FTCC_RECOVERY_PARTS    which parts run: "overhead rejoin kill" (default all three)
# 1. Overhead: ftbench under FTCC_POLICY=abort (the vanilla ring), =shrink
#    (detector, commit steps or kept results, the in-place input saved) and
#    =rejoin (pairwise logs, durability process; a last row durability host)
#    back to back, ROUNDS times, in place (as data-parallel trainers call it)
#    at 4 ranks 64 MiB, 4 and 2 ranks 4 KiB, 8 ranks 64 MiB, and out of
#    place at 4 ranks 64 MiB; median of the per-round medians.
# 1b. Exact rejoin: rejoin_bench, a rank killed (FTCC_FAULT at a point where
#    its log holds the op's input; where it does not; from outside at random)
#    and restarted by ftcc-run --restart: time to the interrupted op
#    returning on every rank.
# 2. Failures (shrink): recovery_bench kills (SIGKILL) or stops (SIGSTOP) a random
#    rank; prints the time to every survivor knowing and to the interrupted
#    op returning on every survivor (8 ranks 64 MiB also with the buffers in
#    transparent huge pages).
set -eu
B=${1:?usage: scripts/bench-recovery.sh BUILD_DIR}
# The rows are the TCP ring's: on one host, abort and shrink would take the
# one-host path (its figures: docs/performance.md, "Under shrink"); FTCC_SHM=1
# measures that instead
export FTCC_SHM=${FTCC_SHM:-0}
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

echo "== cost when nothing fails: shrink and rejoin against abort (the vanilla ring),"
echo "== $R interleaved rounds, median of the per-round medians (µs); float32 sum, TCP"
echo "== rejoin: pairwise logs on, durability process (shared memory); 'host': synced to disk"
echo "| ranks | size | placement | abort µs | shrink µs | rejoin µs | shrink/abort | rejoin/abort |"
echo "|---|---|---|---|---|---|---|---|"
CONFIGS=${FTCC_OVERHEAD_CONFIGS:-4 64M in,4 4K in,2 4K in,8 64M in,4 64M out,4 64M in host}
PARTS=${FTCC_RECOVERY_PARTS:-overhead rejoin kill}
part() { case " $PARTS " in *" $1 "*) return 0 ;; esac; return 1; }

part overhead && IFS=, && for cfg in $CONFIGS; do
	unset IFS
	set -- $cfg
	a=$(mktemp); s=$(mktemp); j=$(mktemp)
	i=0
	while [ $i -lt "$R" ]; do
		one abort "$1" "$2" "$3" >>"$a"
		if [ "${4:-}" = host ]; then
			echo nan >>"$s"
			FTCC_LOG_DURABILITY=host FTCC_LOG_DIR="${TMPDIR:-/tmp}" one rejoin "$1" "$2" "$3" >>"$j"
		else
			one shrink "$1" "$2" "$3" >>"$s"
			one rejoin "$1" "$2" "$3" >>"$j"
		fi
		i=$((i + 1))
	done
	ma=$(median <"$a"); ms=$(grep -v nan "$s" | median); mj=$(median <"$j")
	echo "| $1 | $2 | $3 place${4:+ ($4)} | $ma | $ms | $mj |" \
		"$(awk -v x="$ms" -v y="$ma" 'BEGIN {if (x == "nan") print "-"; else printf "%.3f", x / y}') |" \
		"$(awk -v x="$mj" -v y="$ma" 'BEGIN {printf "%.3f", x / y}') |"
	rm -f "$a" "$s" "$j"
done

part rejoin && {
echo
echo "== exact rejoin, 4 ranks, 64 MiB float32 in place, TCP, $T trials per row (ms, median and max):"
echo "== from the new incarnation's ft_init start, and from the kill, to the interrupted op"
echo "== returning on every rank; one op's own time for scale"
# rejoin_trial SPEC|@SECONDS: one run of rejoin_bench; prints "init_ms kill_ms op_ms"
rejoin_trial() {
	out=$(mktemp)
	case $1 in
	@*) FTCC_POLICY=rejoin timeout 300 "$B/ftcc-run" -n 4 --restart --kill "1$1" \
		"$B/rejoin_bench" 16 67108864 >"$out" 2>&1 ;;
	*) FTCC_POLICY=rejoin FTCC_FAULT="$1" timeout 300 "$B/ftcc-run" -n 4 --restart \
		"$B/rejoin_bench" 10 67108864 >"$out" 2>&1 ;;
	esac
	awk -v kill_at="${1#@}" '
	/\] t0 / {t0 = $NF}
	/\] init / {init = $NF}
	/\] back / {back = $NF}
	/\] op [0-9]+ end / {
		op = $(NF-6) + 0; end = $(NF-4) + 0
		if (!(op in last) || end > last[op]) last[op] = end
		if ($1 ~ /^\[0\]/) e0[op] = end
	}
	/ FTCC_FAULT: killing / {fault = 1}
	END {
		if (init == "" || back == "") { print "nan nan nan"; exit }
		# the interrupted op: the first the survivors return after the new
		# incarnation began (the replayed one, or the one its application runs)
		f = -1
		for (o in last) if (last[o] > init && (f < 0 || o + 0 < f)) f = o + 0
		kill_ns = kill_at ~ /^[0-9.]+$/ && !fault ? t0 + kill_at * 1e9 : 0
		# one op: on rank 0, the time between the two ops before the interrupted one
		op_ms = (e0[f - 1] && e0[f - 2]) ? (e0[f - 1] - e0[f - 2]) / 1e6 : 0
		printf "%.1f %s %.1f\n", (last[f] - init) / 1e6,
			kill_ns ? sprintf("%.1f", (last[f] - kill_ns) / 1e6) : "nan", op_ms
	}' "$out"
	rm -f "$out"
}
echo "| how the rank dies | path | ft_init -> op returned on all | kill -> op returned on all | one op |"
echo "|---|---|---|---|---|"
for row in "rank=1,op=5,phase=allgather,step=1,seg=2|replay from its log" \
	   "rank=1,op=5,phase=reduce_scatter,step=1,seg=2|its application runs the op" \
	   "@random|outside SIGKILL at a random moment"; do
	spec=${row%%|*} path=${row#*|}
	res=$(mktemp)
	i=0
	while [ $i -lt "$T" ]; do
		if [ "$spec" = @random ]; then
			at=$(awk -v s="$(($(od -An -N4 -tu4 /dev/urandom | tr -d " ") % 2147483647))" 'BEGIN{srand(s); printf "%.2f", 1.0 + rand() * 0.8}')
			rejoin_trial "@$at" >>"$res"
		else
			rejoin_trial "$spec" >>"$res"
		fi
		i=$((i + 1))
	done
	mi=$(awk '$1 != "nan" {print $1}' "$res" | median); xi=$(awk '$1 != "nan" {print $1}' "$res" | sort -g | tail -1)
	mk=$(awk '$2 != "nan" {print $2}' "$res" | median); xk=$(awk '$2 != "nan" {print $2}' "$res" | sort -g | tail -1)
	mo=$(awk '$3 > 0 {print $3}' "$res" | median)
	label=$([ "$spec" = @random ] && echo "ftcc-run --kill" || echo "FTCC_FAULT $spec")
	echo "| $label | $path | $mi (max $xi) | ${mk} (max ${xk:-nan}) | $mo |"
	rm -f "$res"
done
}

part kill || exit 0
echo
echo "== failures: $T trials per row (times from the signal, CLOCK_MONOTONIC)"
"$B/recovery_bench" -n 8 -s 4096 -t "$T"
"$B/recovery_bench" -n 8 -s 67108864 -t "$T" | tail -n 1
# the same with the ranks' buffers in huge pages: a killed rank's sockets
# close once the kernel has freed its memory (recovery_bench.c)
"$B/recovery_bench" -n 8 -s 67108864 -t "$T" --hugepages | tail -n 1 | sed 's/^| |/| huge pages |/'
"$B/recovery_bench" -n 4 -s 67108864 -t "$T" | tail -n 1
"$B/recovery_bench" -n 4 -s 4096 -t "$T" | tail -n 1
echo
echo "== a hung rank (SIGSTOP): detection timeout 1000 ms, heartbeat 100 ms"
"$B/recovery_bench" -n 8 -s 4096 -t "$T" --stop --detect-ms 1000 --heartbeat-ms 100
