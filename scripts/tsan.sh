#!/bin/sh
# SPDX-License-Identifier: MIT
# tsan.sh TSAN_BUILD RUN_BUILD: `make tsan`: jobs of ThreadSanitizer-built ranks under the plain ftcc-run; fails on any TSan report or wrong outcome.
#
# Criterion's runner aborts under TSan before any test, so the threads are
# checked in real jobs: TSAN_BUILD/test/tsan_rank (library and program built
# with -fsanitize=thread) launched by RUN_BUILD/ftcc-run (not instrumented).
# The jobs cover what runs on more than one thread: the detector (shrink
# policy: heartbeats, a rank killed from outside at a random moment while the
# job runs, two killed during one recovery, a rank stopped and found by
# heartbeat silence, then let go), and, with libfabric, the shm lock guard
# (a kill over the shm provider wakes it) and the other providers.
# FTCC_TSAN_ONLY=TEXT runs only the jobs whose name contains TEXT.
# Every TSan report goes to a file (log_path) and fails the run, whichever
# rank wrote it, killed ranks included. scripts/tsan.supp lists the
# suppressions, each with its reason.
set -u
T=${1:?usage: scripts/tsan.sh TSAN_BUILD RUN_BUILD}
R=${2:?usage: scripts/tsan.sh TSAN_BUILD RUN_BUILD}
RANK="$T/test/tsan_rank"
RUN="$R/ftcc-run"
for f in "$RANK" "$RUN"; do
	[ -x "$f" ] || { echo "tsan: $f missing; run make tsan" >&2; exit 1; }
done
work=$(mktemp -d "${TMPDIR:-/tmp}/ftcc-tsan-XXXXXX")
trap 'rm -rf "$work"' EXIT
supp="$(cd "$(dirname "$0")" && pwd)/tsan.supp"
TSAN_OPTIONS="halt_on_error=0 exitcode=66 second_deadlock_stack=1 log_path=$work/report suppressions=$supp ${TSAN_OPTIONS:-}"
# TSan makes ranks several times slower: no live rank may look dead.
FTCC_DETECT_TIMEOUT_MS="${FTCC_DETECT_TIMEOUT_MS:-4000}"
FTCC_HEARTBEAT_MS="${FTCC_HEARTBEAT_MS:-100}"
FTCC_LOG_LEVEL="${FTCC_LOG_LEVEL:-1}"
export TSAN_OPTIONS FTCC_DETECT_TIMEOUT_MS FTCC_HEARTBEAT_MS FTCC_LOG_LEVEL
pass=0
fail=0
failed=""
seq=0

# FTCC_TSAN_ONLY=TEXT runs only the jobs whose name contains TEXT.
skip() {
	case "$1" in *"${FTCC_TSAN_ONLY:-}"*) return 1 ;; esac
	return 0
}

# A random number of milliseconds in 0..$1.
rand_ms() {
	od -An -N2 -tu2 /dev/urandom | awk -v m="$1" '{ print $1 % (m + 1) }'
}

sleep_ms() {
	sleep "$(awk -v ms="$1" 'BEGIN { printf "%.3f", ms / 1000 }')"
}

# wait_lines FILE PATTERN COUNT SECONDS: until FILE has COUNT lines matching PATTERN.
wait_lines() {
	end=$(($(date +%s) + $4))
	while [ "$(grep -c -- "$2" "$1" 2>/dev/null)" -lt "$3" ]; do
		[ "$(date +%s)" -ge "$end" ] && return 1
		sleep 0.02
	done
}

# The pid that rank $2 printed in "running pid P" in file $1.
rank_pid() {
	sed -n "s/^\[$2\] running pid \([0-9]*\)\$/\1/p" "$1" | head -n 1
}

# verdict NAME OK: counts the job, prints its output and any new TSan report on failure.
verdict() {
	if ls "$work"/report.* >/dev/null 2>&1; then
		echo "== FAIL $1: ThreadSanitizer reports:"
		cat "$work"/report.*
		mkdir -p "$work/seen" && mv "$work"/report.* "$work/seen/"
		set -- "$1" 1
	fi
	if [ "$2" -eq 0 ]; then
		echo "== ok $1"
		pass=$((pass + 1))
	else
		echo "== FAIL $1; its output:"
		sed 's/^/   /' "$out"
		fail=$((fail + 1))
		failed="$failed '$1'"
	fi
}

# check_shrink N LOST: every rank but the LOST victims printed the same "ok shrink" line with N-LOST members.
check_shrink() {
	oks=$(grep -c '^\[[0-9]*\] ok shrink ' "$out")
	same=$(sed -n 's/^\[[0-9]*\] ok shrink rank [0-9]* //p' "$out" | sort -u)
	if [ "$oks" -ne $(($1 - $2)) ] || [ "$(printf '%s\n' "$same" | wc -l)" -ne 1 ]; then
		echo "tsan: want $(($1 - $2)) identical 'ok shrink' lines, got $oks:" >&2
		printf '%s\n' "$same" >&2
		return 1
	fi
	case "$same" in
	"size $(($1 - $2)) "*) return 0 ;;
	*) echo "tsan: survivors end with '$same', want size $(($1 - $2))" >&2; return 1 ;;
	esac
}

# collectives NAME N ITERS [VAR=VALUE...]: the collective checks on N ranks.
collectives() {
	name=$1 n=$2 iters=$3
	skip "$name" && return 0
	shift 3
	seq=$((seq + 1))
	out="$work/job$seq.out"
	echo "== $name"
	env "$@" "$RUN" -n "$n" --timeout 600 "$RANK" collectives "$iters" >"$out" 2>&1
	rc=$?
	oks=$(grep -c '^\[[0-9]*\] ok collectives ' "$out")
	[ "$rc" -eq 0 ] && [ "$oks" -eq "$n" ]
	verdict "$name" $?
}

# kill_job NAME N COUNT VICTIMS GAP_MS [VAR=VALUE...]: a shrink job on N ranks; once every
# rank runs collectives, after a random delay, SIGKILL each victim, GAP_MS apart.
kill_job() {
	name=$1 n=$2 count=$3 victims=$4 gap=$5
	skip "$name" && return 0
	shift 5
	seq=$((seq + 1))
	out="$work/job$seq.out"
	lost=$(echo "$victims" | wc -w)
	echo "== $name"
	env FTCC_POLICY=shrink "$@" "$RUN" -n "$n" --timeout 600 \
		"$RANK" shrink "$lost" 100 "$count" >"$out" 2>&1 &
	job=$!
	ok=1
	if wait_lines "$out" '^\[[0-9]*\] running pid ' "$n" 120; then
		delay=$(rand_ms 300)
		echo "   kill $victims, $delay ms after all ranks run, $gap ms apart"
		sleep_ms "$delay"
		for v in $victims; do
			kill -KILL "$(rank_pid "$out" "$v")"
			sleep_ms "$gap"
		done
		wait "$job"
		check_shrink "$n" "$lost" 2>>"$out" && ok=0
	else
		echo "tsan: the ranks never all ran" >>"$out"
		kill -TERM "$job" 2>/dev/null
		wait "$job"
	fi
	verdict "$name" $ok
}

# fault_job NAME N SPEC [VAR=VALUE...]: a shrink job on N ranks, one killed by FTCC_FAULT=SPEC.
fault_job() {
	name=$1 n=$2 spec=$3
	skip "$name" && return 0
	shift 3
	seq=$((seq + 1))
	out="$work/job$seq.out"
	echo "== $name"
	env FTCC_POLICY=shrink FTCC_FAULT="$spec" "$@" "$RUN" -n "$n" --timeout 600 \
		"$RANK" shrink 1 100 30001 >"$out" 2>&1
	check_shrink "$n" 1 2>>"$out"
	verdict "$name" $?
}

# stop_job NAME N VICTIM [VAR=VALUE...]: SIGSTOP the victim: heartbeat silence must find it;
# the survivors hold on until it, let go, has exited with -FT_EEXCLUDED (status 42).
stop_job() {
	name=$1 n=$2 victim=$3
	skip "$name" && return 0
	shift 3
	seq=$((seq + 1))
	out="$work/job$seq.out"
	hold="$work/hold$seq"
	echo "== $name"
	env FTCC_POLICY=shrink TSAN_RANK_HOLD="$hold" "$@" "$RUN" -n "$n" --timeout 600 \
		"$RANK" shrink 1 50 5001 >"$out" 2>&1 &
	job=$!
	ok=1
	if wait_lines "$out" '^\[[0-9]*\] running pid ' "$n" 120; then
		vpid=$(rank_pid "$out" "$victim")
		kill -STOP "$vpid"
		if wait_lines "$out" "^\[[0-9]*\] view generation 1 size $((n - 1))\$" $((n - 1)) 120; then
			kill -CONT "$vpid"
			if wait_lines "$out" "rank $victim (pid $vpid) exited with status 42" 1 120; then
				ok=0
			else
				echo "tsan: the stopped rank, let go, did not exit with status 42" >>"$out"
			fi
		else
			echo "tsan: the survivors never settled a view without the stopped rank" >>"$out"
			kill -CONT "$vpid"
		fi
		touch "$hold"
		wait "$job"
		[ "$ok" -eq 0 ] && { check_shrink "$n" 1 2>>"$out" || ok=1; }
	else
		echo "tsan: the ranks never all ran" >>"$out"
		kill -TERM "$job" 2>/dev/null
		wait "$job"
	fi
	verdict "$name" $ok
}

collectives "collectives, tcp, abort" 4 2 FTCC_POLICY=abort
collectives "collectives, tcp, shrink (detector threads)" 4 2 FTCC_POLICY=shrink
kill_job "shrink, tcp, one rank killed" 5 20001 "$(($(rand_ms 4)))" 0
kill_job "shrink, tcp, rank 0 (the coordinator) killed" 4 7 0 0
kill_job "shrink, tcp, a second kill during recovery" 6 20001 "2 4" "$(rand_ms 20)"
fault_job "shrink, tcp, FTCC_FAULT kill in allgather" 4 "rank=2,op=12,phase=allgather,step=1,seg=0"
fault_job "shrink, tcp, FTCC_FAULT kill before ft_init's barrier" 5 "rank=3,op=0"
stop_job "shrink, tcp, a stopped rank found by heartbeat silence" 4 2

if command -v fi_info >/dev/null 2>&1 && grep -q FTCC_HAVE_FABRIC=1 "$T/.flags" 2>/dev/null; then
	for prov in shm "tcp;ofi_rxm"; do
		if ! fi_info -p "$prov" >/dev/null 2>&1; then
			echo "== SKIPPED: libfabric provider '$prov' is not available"
			continue
		fi
		collectives "collectives, fabric/$prov, shrink" 4 1 FTCC_POLICY=shrink \
			FTCC_TRANSPORT=fabric FI_PROVIDER="$prov"
		kill_job "shrink, fabric/$prov, one rank killed" 5 100001 "$(($(rand_ms 4)))" 0 \
			FTCC_TRANSPORT=fabric FI_PROVIDER="$prov"
		kill_job "shrink, fabric/$prov, two ranks killed at once" 5 100001 "1 3" 0 \
			FTCC_TRANSPORT=fabric FI_PROVIDER="$prov"
	done
else
	echo "== SKIPPED: the fabric jobs (this build has no libfabric transport)"
fi

echo
[ -n "$failed" ] && echo "tsan: failed:$failed"
echo "tsan: $pass jobs passed, $fail failed"
[ "$fail" -eq 0 ]
