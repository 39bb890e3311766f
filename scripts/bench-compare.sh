#!/bin/sh
# SPDX-License-Identifier: MIT
# bench-compare.sh: `make bench-compare`: ftcc vs Gloo vs Open MPI vs a pure TCP ring (allreduce, reduce-scatter, allgather), interleaved rounds, into bench-results/.
#
# usage: scripts/bench-compare.sh BUILD_DIR
#
# One interleaved run: for each round, for each collective, world size and
# message size, every implementation runs back to back (one short job each), so that
# drift in machine load (2 shared cores) hits all of them alike. The whole
# round repeats R times; the figure per (impl, ranks, size) is the median of
# the per-round medians.
#
# Implementations: ftcc over TCP (FTCC_SHM=0: the algorithm chosen by size;
# ftcc-tcp-ring, ftcc-tcp-rd and ftcc-tcp-rh force one, FTCC_ALGORITHM); ftcc-onehost, ftcc's
# one-host path (collectives in shared memory, FTCC_POLICY=abort: the path
# the job takes when every rank shares one host); Gloo (ring allreduce and allgather,
# halving-doubling reduce-scatter, over TCP); Open MPI over TCP and over
# shared memory; tcp-ring (bench/tcp_ring.c), plain sockets moving the bytes
# ftcc's ring moves with no reduction, copy or framing: the wire's own speed.
# Every driver runs in place unless FTCC_COMPARE_ARGS says otherwise
# (trainers reduce gradients in place).
#
# env: FTCC_COMPARE_COLLS   collectives (default "allreduce reduce_scatter allgather";
#                           also broadcast, from rank 0: ftcc and Open MPI only)
#      FTCC_COMPARE_SIZES   message sizes, the whole vector (default "4K 64K 1M 4M 64M")
#      FTCC_COMPARE_RANKS   world sizes (default "2 4 8")
#      FTCC_COMPARE_ROUNDS  rounds R (default 3)
#      FTCC_COMPARE_IMPLS   implementations (default "ftcc-tcp ftcc-onehost tcp-ring gloo
#                           openmpi-tcp openmpi-shm")
#      FTCC_COMPARE_FABRIC=1  add ftcc over libfabric (FI_PROVIDER=shm and
#                           "tcp;ofi_rxm") when the build has the fabric transport
#      FTCC_COMPARE_ARGS    flags for every driver (default "--in-place"; "" runs
#                           out of place; e.g. "--in-place --iters 50")
#      FTCC_COMPARE_MPI_ARGS extra mpirun flags (e.g. "--mca btl_tcp_if_include lo")
#      FTCC_COMPARE_MPI_MALLOC=0  run Open MPI without the malloc tuning below
#      FTCC_COMPARE_TIMEOUT seconds per job (default 900)
#      FTCC_COMPARE_OUT     output directory (default bench-results)
#      MPIRUN               Open MPI launcher (default mpirun.openmpi)
# FTCC_* settings for ftcc itself (FTCC_POLICY, FTCC_LOG_DURABILITY, ...) pass
# through from the environment to the ftcc jobs.
#
# Output: OUT/compare-raw.csv (round,coll,impl,transport,ranks,bytes,median_us,
# algbw_GBps,busbw_GBps), OUT/compare.csv (coll and the drivers' columns, median
# over rounds), OUT/compare.txt (the table below), OUT/compare-logs/ (every job's output).
set -eu

B=${1:?usage: scripts/bench-compare.sh BUILD_DIR}
OUT=${FTCC_COMPARE_OUT:-bench-results}
COLLS=${FTCC_COMPARE_COLLS:-allreduce reduce_scatter allgather}
SIZES=${FTCC_COMPARE_SIZES:-4K 64K 1M 4M 64M}
RANKS=${FTCC_COMPARE_RANKS:-2 4 8}
ROUNDS=${FTCC_COMPARE_ROUNDS:-3}
TMO=${FTCC_COMPARE_TIMEOUT:-900}
ARGS=${FTCC_COMPARE_ARGS---in-place}
MPI_ARGS=${FTCC_COMPARE_MPI_ARGS:-}
MPIRUN=${MPIRUN:-mpirun.openmpi}
# Open MPI's allreduce allocates (and frees) a scratch buffer of the message's
# size on every call; glibc hands buffers that large back to the kernel, so
# every call would page-fault its scratch in afresh. Keep them in the heap, so
# that Open MPI is measured at its best (FTCC_COMPARE_MPI_MALLOC=0: as it comes).
MPI_MALLOC=
if [ "${FTCC_COMPARE_MPI_MALLOC:-1}" = 1 ]; then
	MPI_MALLOC="-x MALLOC_MMAP_THRESHOLD_=4294967296 -x MALLOC_TRIM_THRESHOLD_=68719476736 -x MALLOC_TOP_PAD_=536870912"
fi

for f in ftcc-run ftbench gloo_bench mpi_bench tcp_ring; do
	[ -x "$B/$f" ] || { echo "bench-compare: $B/$f missing; run make bench-compare" >&2; exit 1; }
done
command -v "$MPIRUN" >/dev/null || { echo "bench-compare: $MPIRUN not found" >&2; exit 1; }

IMPLS=${FTCC_COMPARE_IMPLS:-ftcc-tcp ftcc-onehost tcp-ring gloo openmpi-tcp openmpi-shm}
if [ "${FTCC_COMPARE_FABRIC:-0}" = 1 ]; then
	# The Makefile compiles transports/fabric/ only when pkg-config finds libfabric.
	if [ -f "$B/libftcc.a" ] && nm "$B/libftcc.a" 2>/dev/null | grep -q ' D ft__fabric_ops$'; then
		IMPLS="$IMPLS ftcc-fabric-shm ftcc-fabric-tcp"
	else
		echo "bench-compare: FTCC_COMPARE_FABRIC=1 but $B/libftcc.a has no fabric transport; skipping it" >&2
	fi
fi

mkdir -p "$OUT/compare-logs"
OUT=$(cd "$OUT" && pwd)
B=$(cd "$B" && pwd)
RAW=$OUT/compare-raw.csv
echo "round,coll,impl,transport,ranks,bytes,median_us,algbw_GBps,busbw_GBps" >"$RAW"
rm -f "$OUT"/compare-logs/*.log

# run_one COLL IMPL RANKS SIZE CSV: one job, one message size; returns its status.
run_one() {
	coll=$1 impl=$2 n=$3 size=$4 csv=$5
	common="--coll $coll --min $size --max $size --label $impl --csv $csv $ARGS"
	# shellcheck disable=SC2086 # $common, $ARGS and $MPI_ARGS are word lists
	case $impl in
	ftcc-tcp)
		FTCC_TRANSPORT=tcp FTCC_SHM=0 timeout "$TMO" "$B/ftcc-run" -n "$n" "$B/ftbench" $common ;;
	ftcc-tcp-ring|ftcc-tcp-rd|ftcc-tcp-rh)
		FTCC_TRANSPORT=tcp FTCC_SHM=0 FTCC_ALGORITHM=${impl#ftcc-tcp-} \
			timeout "$TMO" "$B/ftcc-run" -n "$n" "$B/ftbench" $common ;;
	ftcc-onehost)
		FTCC_TRANSPORT=tcp FTCC_SHM=1 FTCC_POLICY=abort \
			timeout "$TMO" "$B/ftcc-run" -n "$n" "$B/ftbench" $common ;;
	ftcc-fabric-shm)
		FTCC_TRANSPORT=fabric FI_PROVIDER=shm FTCC_SHM=0 \
			timeout "$TMO" "$B/ftcc-run" -n "$n" "$B/ftbench" $common ;;
	ftcc-fabric-tcp)
		FTCC_TRANSPORT=fabric FI_PROVIDER="tcp;ofi_rxm" FTCC_SHM=0 \
			timeout "$TMO" "$B/ftcc-run" -n "$n" "$B/ftbench" $common ;;
	tcp-ring)
		timeout "$TMO" "$B/ftcc-run" -n "$n" "$B/tcp_ring" $common ;;
	gloo)
		timeout "$TMO" "$B/ftcc-run" -n "$n" "$B/gloo_bench" $common ;;
	openmpi-tcp)
		timeout "$TMO" "$MPIRUN" --allow-run-as-root --oversubscribe -np "$n" \
			--mca pml ob1 --mca btl tcp,self $MPI_MALLOC $MPI_ARGS "$B/mpi_bench" $common ;;
	openmpi-shm)
		timeout "$TMO" "$MPIRUN" --allow-run-as-root --oversubscribe -np "$n" \
			--mca pml ob1 --mca btl vader,self $MPI_MALLOC $MPI_ARGS "$B/mpi_bench" $common ;;
	*)
		echo "bench-compare: unknown impl $impl" >&2
		return 2 ;;
	esac
}

failures=0
round=1
while [ "$round" -le "$ROUNDS" ]; do
	for coll in $COLLS; do
	for n in $RANKS; do
		for size in $SIZES; do
			for impl in $IMPLS; do
				tmp=$(mktemp)
				log=$OUT/compare-logs/$coll-$impl-n$n-$size-r$round.log
				rc=0
				run_one "$coll" "$impl" "$n" "$size" "$tmp" >"$log" 2>&1 </dev/null || rc=$?
				row=$(sed -n 2p "$tmp")
				rm -f "$tmp"
				if [ "$rc" -eq 0 ] && [ -n "$row" ]; then
					echo "$round,$coll,$row" >>"$RAW"
					echo "$row" | awk -F, -v r="$round" -v R="$ROUNDS" -v c="$coll" \
						'{ printf "round %s/%s  %-14s n=%-2s %8s B  %-16s %12.2f us  busbw %8.3f GB/s\n", r, R, c, $3, $4, $1, $5, $7 }'
				else
					failures=$((failures + 1))
					[ "$rc" -eq 0 ] && why="no result row" || why="status $rc"
					echo "round $round/$ROUNDS  $coll n=$n  $size  $impl: FAILED ($why), see $log" >&2
				fi
			done
		done
	done
	done
	round=$((round + 1))
done

python3 - "$RAW" "$OUT/compare.csv" "$ROUNDS" "$IMPLS" <<'EOF' | tee "$OUT/compare.txt"
import csv, statistics, sys
raw, out, rounds, impls = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4].split()

groups = {}
for r in csv.DictReader(open(raw)):
    key = (r["coll"], r["impl"], r["transport"], int(r["ranks"]), int(r["bytes"]))
    groups.setdefault(key, []).append(float(r["median_us"]))

med = {}  # (coll, impl, ranks, bytes) -> (median_us, rounds that ran)
with open(out, "w", newline="") as f:
    w = csv.writer(f)
    w.writerow(["coll", "impl", "transport", "ranks", "bytes", "median_us", "algbw_GBps", "busbw_GBps"])
    for (coll, impl, tr, n, b), v in sorted(groups.items(), key=lambda kv: (kv[0][0], kv[0][3], kv[0][4], kv[0][1])):
        m = statistics.median(v)
        alg = b / (m * 1e-6) / 1e9 if m > 0 else 0.0
        half = (n - 1) / n if n > 1 else 0.0
        bus = alg * (2 * half if coll == "allreduce" else half)
        w.writerow([coll, impl, tr, n, b, "%.3f" % m, "%.6f" % alg, "%.6f" % bus])
        med[(coll, impl, n, b)] = (m, len(v))

def human(b):
    for s, u in ((30, "G"), (20, "M"), (10, "K")):
        if b >= 1 << s and b % (1 << s) == 0:
            return "%d%s" % (b >> s, u)
    return str(b)

short = {"ftcc-tcp": "ftcc", "ftcc-onehost": "onehost", "openmpi-tcp": "ompi-tcp",
         "openmpi-shm": "ompi-shm",
         "ftcc-fabric-shm": "fab-shm", "ftcc-fabric-tcp": "fab-tcp", "gloo": "gloo",
         "tcp-ring": "wire", "best": "best"}
pairs = (("ftcc-tcp", "tcp-ring"), ("ftcc-tcp", "openmpi-tcp"), ("ftcc-tcp", "gloo"),
         ("ftcc-tcp", "openmpi-shm"), ("ftcc-onehost", "openmpi-shm"),
         ("ftcc-fabric-shm", "openmpi-shm"),
         ("ftcc-fabric-tcp", "openmpi-tcp"), ("ftcc-tcp", "best"), ("ftcc-onehost", "best"))

for coll in sorted({k[0] for k in med}, key=["allreduce", "reduce_scatter", "allgather", "broadcast"].index):
    # best: the faster of Open MPI (either transport) and Gloo in that cell
    for n, b in {(k[2], k[3]) for k in med if k[0] == coll}:
        peers = [med[(coll, i, n, b)] for i in ("openmpi-tcp", "openmpi-shm", "gloo")
                 if (coll, i, n, b) in med]
        if peers:
            med[(coll, "best", n, b)] = min(peers)
    present = [i for i in impls if any(k[0] == coll and k[1] == i for k in med)]
    have = present + ["best"]
    ratios = [(a, o) for a, o in pairs if a in have and o in have]
    print()
    print("%s median time in us (median over %d rounds; * = fewer rounds succeeded);" % (coll, rounds))
    print("ratios are time ftcc / other: below 1 means ftcc is faster; wire = tcp-ring;")
    print("best = the faster of Open MPI (tcp or shm) and Gloo")
    hdr = "%5s %6s" % ("ranks", "size") + "".join(" %14s" % i for i in present)
    hdr += " |" + "".join(" %17s" % ("%s/%s" % (short[a], short[o])) for a, o in ratios)
    print(hdr)
    for n, b in sorted({(k[2], k[3]) for k in med if k[0] == coll}):
        line = "%5d %6s" % (n, human(b))
        for i in present:
            c = med.get((coll, i, n, b))
            line += " %14s" % ("-" if c is None else "%.2f%s" % (c[0], "*" if c[1] < rounds else ""))
        line += " |"
        for a, o in ratios:
            x, y = med.get((coll, a, n, b)), med.get((coll, o, n, b))
            line += " %17s" % ("-" if x is None or y is None or y[0] <= 0 else "%.2f" % (x[0] / y[0]))
        print(line)
EOF

echo "bench-compare: $OUT/compare.csv, $OUT/compare.txt, raw rounds in $RAW"
if [ "$failures" -ne 0 ]; then
	echo "bench-compare: $failures job(s) failed; logs in $OUT/compare-logs" >&2
	exit 1
fi
