#!/bin/sh
# SPDX-License-Identifier: MIT
# cluster_test.sh BUILD_DIR: ftcc across 4 namespace hosts x 2 ranks: correct results over tcp and libfabric, a whole host killed under shrink, with file and in-band membership; in-band, a silent link-down and partitions.
#
# Each row but linkdown and part is a real mpirun job (test/cluster/netns.sh mpirun) with no
# FTCC_BIND_HOST: every rank must find its address by itself. Rows:
#   tcp, fabric (tcp;ofi_rxm):  allreduce_check (fabric: row fabric-check) and tsan_rank's collectives
#       matrix (dtypes, ops, counts, in place, broadcast from every root,
#       barriers), every rank checking its results;
#   tcp and fabric, shrink: a whole host (both its ranks, its Open MPI
#       daemon) SIGKILLed mid-job; the six survivors finish exactly
#       (tsan_rank shrink: every result checked against the inputs of the
#       members left).
# In-band rows (no rendezvous directory: FTCC_RENDEZVOUS unset, each rank's
# TMPDIR an empty directory of its host's own, so no file fallback can work):
#   ib-tcp: allreduce_check and the collectives matrix, ib-fabric: the
#       matrix (a fabric job starts in some 8 s), with
#       FTCC_MEMBERSHIP=inband, first addresses from PMIx (ib-tcp's
#       allreduce_check sets no FTCC_MEMBERSHIP at all: in-band and PMIx are
#       chosen because mpirun spans hosts);
#   ib-peers: the same under mpirun with FTCC_BOOTSTRAP=peers, FTCC_PEERS the
#       hosts' addresses, ports 7100/7101;
#   ib-kill: the kill row, in-band;
#   ckpt-peer: running checkpoints in peers' memory (FTCC_CKPT_WHERE=peer,
#       examples/train_sharded take, shrink): host 4 killed once every
#       rank's rounds go to its holder and some 0.3 s more; each of the six
#       survivors reads both lost ranks' whole shards back (from host 1's
#       memory: ranks 6 and 7 are held by 0 and 1) and checks every block,
#       and no checkpoint file is written anywhere;
#   linkdown, part: ranks started without mpirun (netns.sh exec, FTCC_PEERS:
#       Open MPI 4.1's daemons do not survive a silent cut), test/part_rank
#       (float sums checked over the current members), shrink,
#       FTCC_DETECT_TIMEOUT_MS=1000. linkdown: host 4's link drops silently
#       mid-job; the 6 others finish exactly, their new view settles within
#       CLUSTER_DETECT_SLACK_MS (250: the link-down command's own time and the
#       settling) of 1.1 x the detect timeout after the command began (the
#       times are printed), and host 4's ranks end with EPARTITIONED or
#       EXCLUDED, no result after the cut. part: 1,2|3,4 (hosts 1,2 go on with
#       4 ranks) and 1,2,3|4 (6 ranks): the minority's ranks stop with
#       EPARTITIONED and no result after the split; then heal, and the
#       majority runs on over 2 s more with exact results of its own size and
#       no new view. part-half: only the first split (1,2|3,4).
# CLUSTER_ROWS picks rows (default all of them but fabric-check, the fabric
# allreduce_check row: fabric jobs take some 8 s in the namespaces, and the
# matrix covers allreduce; the whole default run takes ~90 s), CLUSTER_KILL_TRIALS
# repeats the kill row (1), CLUSTER_DEADLINE is each job's deadline in s (40).
# Membership: CLUSTER_MEMBERSHIP=file (default) gives the ranks a shared
# rendezvous directory (namespaces share the file system); inband sets
# FTCC_MEMBERSHIP=inband and no directory. Every job runs under a deadline:
# a hang is a failure. Exit 0 all passed, 1 a row failed, 77 skipped (not
# root, no namespaces, no mpirun): SKIPPED says why.
set -eu
B=$(cd "$1" && pwd)
# The namespace hosts share this machine's /dev/shm: ranks of different
# hosts would reach each other through the one-host path, and no row would
# cross the network it is here to test (real hosts have a /dev/shm each).
export FTCC_SHM=0
HERE=$(cd "$(dirname "$0")" && pwd)
NETNS=$HERE/netns.sh
DEADLINE=${CLUSTER_DEADLINE:-40}
MEMBERSHIP=${CLUSTER_MEMBERSHIP:-file}
ROWS=${CLUSTER_ROWS:-tcp fabric kill ckpt-peer ib-tcp ib-fabric ib-peers ib-kill linkdown part}
TRIALS=${CLUSTER_KILL_TRIALS:-1}

command -v mpirun >/dev/null 2>&1 || { echo "SKIPPED: cluster tests: no mpirun (Open MPI)"; exit 77; }
for p in examples/allreduce_check examples/train_sharded test/tsan_rank test/part_rank; do
	[ -x "$B/$p" ] || { echo "cluster_test.sh: $B/$p is not built (make $B/$p)" >&2; exit 1; }
done
C=$(mktemp -d "${TMPDIR:-/tmp}/ftcc-cluster.XXXXXX")
RDV=$C.rdv
OUT=$C.out
cleanup() {
	"$NETNS" "$C" destroy || true
	rm -rf "$RDV" "$OUT" "$C" "$C".r? "$C".tmp*
}
trap cleanup EXIT
trap 'exit 1' INT TERM
rc=0
"$NETNS" "$C" create 4 >/dev/null || rc=$?
if [ "$rc" -ne 0 ]; then
	rmdir "$C" 2>/dev/null || true
	exit "$rc"
fi
unset FTCC_BIND_HOST FTCC_RENDEZVOUS FTCC_MEMBERSHIP FTCC_BOOTSTRAP FTCC_PEERS FTCC_STORE
mkdir -p "$RDV"
if [ "$MEMBERSHIP" = file ]; then
	MEMB="-x FTCC_RENDEZVOUS=$RDV"
else
	MEMB="-x FTCC_MEMBERSHIP=$MEMBERSHIP"
fi

pass=0 fail=0
row() { # description expected-ok-lines mpirun-args...
	d=$1 want=$2
	shift 2
	t0=$(date +%s)
	st=0
	# shellcheck disable=SC2086
	timeout -k 5 "$DEADLINE" "$NETNS" "$C" mpirun -np 8 $MEMB "$@" >"$OUT" 2>&1 || st=$?
	got=$(grep -c "^ok \|: correct," "$OUT" || true)
	[ "$st" -eq 0 ] && [ "$got" -eq "$want" ]
	verdict $? "" "$got of $want ok lines"
}
# verdict STATUS OK-DETAIL FAIL-DETAIL: counts row $d (0: passed), prints its
# line (and the tail of $OUT when it failed), empties the rendezvous
verdict() {
	if [ "$1" -eq 0 ]; then
		pass=$((pass + 1))
		echo "ok   $d$2 ($(($(date +%s) - t0)) s)"
	else
		fail=$((fail + 1))
		echo "FAIL $d: exit $st$([ "$st" -eq 124 ] && echo " (deadline)"), $3 ($(($(date +%s) - t0)) s)"
		sed 's/^/     /' "$OUT" | tail -40
	fi
	rm -rf "${RDV:?}"/*; [ -z "${CLUSTER_KEEP:-}" ] || cp "$OUT" "$CLUSTER_KEEP.$pass.$fail"
	# the next row's output starts empty: its job truncates $OUT only once
	# started, and a row waiting for lines must not count this row's
	rm -f "$OUT"
}

fabric() { command -v fi_info >/dev/null 2>&1 && fi_info -p "$1" >/dev/null 2>&1; }

want() { case " $ROWS " in *" $1 "*) return 0 ;; *) return 1 ;; esac; }

echo "== 4 namespace hosts x 2 ranks, mpirun, no FTCC_BIND_HOST, membership $MEMBERSHIP"
if want tcp; then
	row "tcp: allreduce_check" 1 "$B/examples/allreduce_check" 100003 5
	row "tcp: collectives matrix" 8 "$B/test/tsan_rank" collectives 1
fi
if ! want fabric; then
	:
elif fabric "tcp;ofi_rxm"; then
	if want fabric-check; then
		row "fabric tcp;ofi_rxm: allreduce_check" 1 -x FTCC_TRANSPORT=fabric -x "FI_PROVIDER=tcp;ofi_rxm" \
			"$B/examples/allreduce_check" 100003 5
	fi
	row "fabric tcp;ofi_rxm: collectives matrix" 8 -x FTCC_TRANSPORT=fabric \
		-x "FI_PROVIDER=tcp;ofi_rxm" "$B/test/tsan_rank" collectives 1
else
	echo "SKIPPED: libfabric provider 'tcp;ofi_rxm' is not available"
fi

# A whole host killed mid-job: host 4 (ranks 6 and 7, and its orted) once
# every rank has run its first op; mpirun is kept alive by
# --enable-recovery. The survivors' results are checked by tsan_rank.
# CLUSTER_MPIRUN_ARGS adds mpirun options to this row.
ranks_alive() { # how many rank processes (tsan_rank) hosts 1..3 still hold
	for h in 1 2 3; do
		for p in $("$NETNS" "$C" pids "$h"); do
			[ "$(cat "/proc/$p/comm" 2>/dev/null)" = tsan_rank ] && echo "$p"
		done
	done | wc -l
}

kill_row() { # description extra-mpirun-args...
	d=$1
	shift
	t0=$(date +%s)
	st=0
	# shellcheck disable=SC2086
	timeout -k 5 "$DEADLINE" "$NETNS" "$C" mpirun -np 8 --enable-recovery $MEMB ${CLUSTER_MPIRUN_ARGS:-} \
		-x FTCC_POLICY=shrink "$@" "$B/test/tsan_rank" shrink 2 "${CLUSTER_AFTER_OPS:-30}" 100000 >"$OUT" 2>&1 &
	job=$!
	t=0
	while [ "$(grep -c "^running pid" "$OUT" || true)" -lt 8 ] && [ "$t" -lt 200 ]; do
		sleep 0.1
		t=$((t + 1))
	done
	started=$(grep -c "^running pid" "$OUT" || true)
	waited=$t
	"$NETNS" "$C" kill 4
	# Open MPI 4.1 does not get over a lost daemon: once the survivors have
	# all exited, mpirun waits for it for good (rsh-agent.sh says why). The
	# survivors are what is tested: when they are gone and mpirun is not
	# 3 s later, the remaining hosts are stopped too, and it is said.
	# (times in ms: each ranks_alive takes some 0.3 s of netns.sh calls)
	k=$(($(date +%s%N) / 1000000)) t=0 left=""
	while [ "$t" -lt $((DEADLINE * 1000)) ] && kill -0 "$job" 2>/dev/null; do
		[ "$(ranks_alive)" -eq 0 ] && left=${left:-$t}
		[ -n "$left" ] && [ $((t - left)) -ge 3000 ] && break
		sleep 0.1
		t=$(($(date +%s%N) / 1000000 - k))
	done
	note=""
	if kill -0 "$job" 2>/dev/null && [ -n "$left" ]; then
		note=", mpirun stopped: it did not exit 3 s after the survivors"
		for h in 1 2 3; do "$NETNS" "$C" kill "$h"; done
	fi
	wait "$job" || st=$?
	got=$(grep -c "^ok shrink rank [0-5] size 6 " "$OUT" || true)
	# mpirun reports the lost host's ranks and exits nonzero: judge the survivors
	[ "$got" -eq 6 ] && [ -n "$left" ] && [ "$started" -eq 8 ]
	verdict $? ": 6 survivors exact (host killed $((waited / 10)).$((waited % 10)) s after the start, survivors gone $left ms after the kill; mpirun exit $st$note)" \
		"$got of 6 survivors ok, killed after $((waited / 10)) s with $started of 8 ranks running"
}
if want kill; then
	i=0
	while [ "$i" -lt "$TRIALS" ]; do
		kill_row "tcp, shrink: host 4 killed mid-job"
		if want fabric && fabric "tcp;ofi_rxm"; then
			kill_row "fabric tcp;ofi_rxm, shrink: host 4 killed mid-job" \
				-x FTCC_TRANSPORT=fabric -x "FI_PROVIDER=tcp;ofi_rxm"
		fi
		i=$((i + 1))
	done
fi

# A whole host lost with its ranks' running checkpoints: they were in
# the memory of the next host's ranks, which the survivors read them from
# over the network (FTCC_CKPT_LOCAL=0: the namespace hosts share one
# kernel, where a fetch would read the holder's memory in one copy).
if want ckpt-peer; then
	d="ckpt-peer: tcp, shrink, checkpoints in peers' memory: host 4 killed mid-job"
	t0=$(date +%s)
	st=0
	# shellcheck disable=SC2086
	timeout -k 5 "$DEADLINE" "$NETNS" "$C" mpirun -np 8 --enable-recovery $MEMB \
		-x FTCC_POLICY=shrink -x FTCC_CKPT_WHERE=peer -x "FTCC_CKPT_DIR=$C.ck" -x FTCC_LOG_LEVEL=2 \
		-x FTCC_CKPT_LOCAL=0 \
		"$B/examples/train_sharded" 400 65536 5 take >"$OUT" 2>&1 &
	job=$!
	t=0
	while [ "$(grep -c "rounds go to rank" "$OUT" || true)" -lt 8 ] && [ "$t" -lt 200 ]; do
		sleep 0.1
		t=$((t + 1))
	done
	started=$(grep -c "rounds go to rank" "$OUT" || true)
	sleep 0.3
	"$NETNS" "$C" kill 4
	# the survivors finish and exit; Open MPI 4.1 then waits for the lost
	# daemon for good (kill_row): the other hosts are stopped once the
	# survivors are gone
	k=$(($(date +%s%N) / 1000000)) t=0 left=""
	while [ "$t" -lt $((DEADLINE * 1000)) ] && kill -0 "$job" 2>/dev/null; do
		n=0
		for h in 1 2 3; do
			for p in $("$NETNS" "$C" pids "$h"); do
				[ "$(cat "/proc/$p/comm" 2>/dev/null)" = train_sharded ] && n=$((n + 1))
			done
		done
		[ "$n" -eq 0 ] && left=${left:-$t}
		[ -n "$left" ] && [ $((t - left)) -ge 3000 ] && break
		sleep 0.1
		t=$(($(date +%s%N) / 1000000 - k))
	done
	if kill -0 "$job" 2>/dev/null && [ -n "$left" ]; then
		for h in 1 2 3; do "$NETNS" "$C" kill "$h"; done
	fi
	wait "$job" || st=$?
	took=$(grep -c "took rank [67]'s shard ok: 64 blocks" "$OUT" || true)
	okd=$(grep -c "shard ok;" "$OUT" || true)
	bad=$(grep -c "BAD\|DIFFERENT" "$OUT" || true)
	files=$(find "$C.ck" -type f 2>/dev/null | wc -l)
	[ "$started" -eq 8 ] && [ "$took" -eq 12 ] && [ "$okd" -eq 6 ] && [ "$bad" -eq 0 ] && [ "$files" -eq 0 ]
	verdict $? ": 6 survivors took ranks 6 and 7's shards back from host 1's memory, exact; no checkpoint file" \
		"$took of 12 shards taken back, $okd of 6 survivors exact, $bad bad, $files files, $started of 8 streaming"
	rm -rf "$C.ck"
fi

# ---- in-band rows ----
# A rank's own TMPDIR, empty, per host (the rank's host name is hI).
# shellcheck disable=SC2016
PERHOST='d=$0.$(hostname); mkdir -p "$d"; TMPDIR=$d exec "$@"'
IB="-x FTCC_MEMBERSHIP=inband"
with_memb() { # MEMB-value command...: the command with MEMB set to the value
	save=$MEMB
	MEMB=$1
	shift
	"$@"
	MEMB=$save
}
if want ib-tcp; then
	with_memb "" row "ib-tcp: allreduce_check, membership and bootstrap chosen (in-band, PMIx)" 1 \
		sh -c "$PERHOST" "$C.tmp" "$B/examples/allreduce_check" 100003 5
	with_memb "$IB" row "ib-tcp: collectives matrix, in-band, PMIx" 8 -x FTCC_BOOTSTRAP=pmix \
		sh -c "$PERHOST" "$C.tmp" "$B/test/tsan_rank" collectives 1
fi
if ! want ib-fabric; then
	:
elif fabric "tcp;ofi_rxm"; then
	with_memb "$IB" row "ib-fabric tcp;ofi_rxm: collectives matrix, in-band, PMIx" 8 -x FTCC_TRANSPORT=fabric \
		-x "FI_PROVIDER=tcp;ofi_rxm" sh -c "$PERHOST" "$C.tmp" "$B/test/tsan_rank" collectives 1
else
	echo "SKIPPED: libfabric provider 'tcp;ofi_rxm' is not available"
fi
PEERS=$(for h in 1 2 3 4; do a=$("$NETNS" "$C" addr "$h"); echo "$a:7100,$a:7101"; done | paste -sd, -)
if want ib-peers; then
	with_memb "$IB" row "ib-peers: allreduce_check, in-band, FTCC_PEERS" 1 -x FTCC_BOOTSTRAP=peers \
		-x "FTCC_PEERS=$PEERS" -x "FTCC_TOKEN=ibpeers$$" sh -c "$PERHOST" "$C.tmp" \
		"$B/examples/allreduce_check" 100003 5
fi
if want ib-kill; then
	with_memb "$IB" kill_row "ib-kill: tcp, shrink, in-band: host 4 killed mid-job" sh -c "$PERHOST" "$C.tmp"
fi

# Ranks started without mpirun: rank r on host r/2+1, port 7100 + r%2.
DETECT=1000
launch() { # SECONDS
	for r in 0 1 2 3 4 5 6 7; do
		h=$((r / 2 + 1))
		rm -rf "$C.tmp.h$h" && mkdir -p "$C.tmp.h$h"
		timeout -k 2 "$DEADLINE" "$NETNS" "$C" exec "$h" env -u FTCC_RENDEZVOUS TMPDIR="$C.tmp.h$h" \
			FTCC_RANK=$r FTCC_WORLD_SIZE=8 FTCC_PEERS="$PEERS" FTCC_MEMBERSHIP=inband \
			FTCC_BOOTSTRAP=peers FTCC_JOB_ID="part$$" FTCC_TOKEN="tok$$" FTCC_POLICY=shrink \
			FTCC_DETECT_TIMEOUT_MS=$DETECT "$B/test/part_rank" "$1" 1000 >"$C.r$r" 2>&1 &
		eval "pid$r=\$!"
	done
	t=0
	while [ "$(cat "$C".r? 2>/dev/null | grep -c "^running pid")" -lt 8 ] && [ "$t" -lt 100 ]; do
		sleep 0.1
		t=$((t + 1))
	done
}
now() { date +%s%N; }
exited() { # ranks...: true once they have all exited
	for r in "$@"; do eval "kill -0 \$pid$r" 2>/dev/null && return 1; done
	return 0
}
wait_exit() { # ranks...: up to DEADLINE s
	t=0
	while ! exited "$@" && [ "$t" -lt $((DEADLINE * 10)) ]; do
		sleep 0.1
		t=$((t + 1))
	done
}
field() { # file word: the number after word on the file's first line holding it
	sed -n "s/.* $2 \([0-9]*\).*/\1/p" "$1" | head -1
}
# check_sides CUT_NS HEAL_NS SIZE majority-ranks -- minority-ranks: sets why
check_sides() {
	cut=$1 healed=$2 size=$3
	shift 3
	why=""
	while [ "$1" != -- ]; do
		r=$1
		shift
		eval "wait \$pid$r" && st=0 || st=$?
		f=$C.r$r
		if [ "$st" -ne 0 ] || ! grep -q "^ok part rank $r size $size " "$f"; then
			why="$why; rank $r (majority) exit $st, no 'ok ... size $size'"
		elif [ "$(grep -c "^view " "$f")" -ne 1 ] || ! grep -q "^view rank $r gen 1 size $size " "$f"; then
			why="$why; rank $r (majority) views: $(grep "^view" "$f" | tr '\n' ' ')"
		elif [ -n "$healed" ] && [ $(($(field "$f" last) - healed)) -lt 2000000000 ]; then
			why="$why; rank $r (majority) ran only $((($(field "$f" last) - healed) / 1000000)) ms after heal"
		fi
		grep -q "^WRONG" "$f" && why="$why; rank $r: $(grep "^WRONG" "$f")"
	done
	shift
	for r in "$@"; do
		eval "wait \$pid$r" && st=0 || st=$?
		f=$C.r$r
		last=$(sed -n 's/^err part rank .* last \([0-9]*\) at .*/\1/p' "$f")
		if [ "$st" -ne 43 ] && [ "$st" -ne 42 ]; then
			why="$why; rank $r (cut off) exit $st, not 43 (EPARTITIONED) or 42 (EXCLUDED)"
		elif grep -q "^ok part\|^view\|^WRONG" "$f"; then
			why="$why; rank $r (cut off) printed results: $(grep "^ok part\|^view\|^WRONG" "$f" | tr '\n' ' ')"
		elif [ -z "$last" ] || [ "$last" -ge "$cut" ]; then
			why="$why; rank $r (cut off): an op ended after the cut (last '$last', cut $cut)"
		fi
	done
}
report() { # description
	if [ -z "$why" ]; then
		pass=$((pass + 1))
		echo "ok   $1 ($(($(date +%s) - t0)) s)"
	else
		fail=$((fail + 1))
		echo "FAIL $1:${why#;}"
		for r in 0 1 2 3 4 5 6 7; do sed "s/^/     [$r] /" "$C.r$r"; done | tail -60
	fi
}

if want linkdown; then
	t0=$(date +%s)
	launch 6
	sleep 1
	a=$(now)
	"$NETNS" "$C" linkdown 4
	b=$(now)
	wait_exit 6 7
	"$NETNS" "$C" linkup 4
	echo "     host 4's ranks stopped $(for r in 6 7; do echo $((($(field "$C.r$r" at) - b) / 1000000)); done | paste -sd' ' -) ms after the link went down"
	check_sides "$b" "" 6 0 1 2 3 4 5 -- 6 7
	lo="" hi=""
	for r in 0 1 2 3 4 5; do
		s=$(field "$C.r$r" settled)
		[ -n "$s" ] || continue
		[ -z "$lo" ] || [ "$s" -lt "$lo" ] && lo=$s
		[ -z "$hi" ] || [ "$s" -gt "$hi" ] && hi=$s
	done
	slack=${CLUSTER_DETECT_SLACK_MS:-250}
	bound=$((DETECT * 11 / 10 + slack))
	if [ -n "$hi" ]; then
		k=$(field "$C.r0" known)
		echo "     link down -> new view: $(((lo - a) / 1000000))..$(((hi - a) / 1000000)) ms after the command began ($(((hi - b) / 1000000)) ms after it returned; it took $(((b - a) / 1000000)) ms); rank 0 knew of the failure at $(((k - a) / 1000000)) ms; bound $bound ms (detect $DETECT ms + 10% + $slack)"
		[ $(((hi - a) / 1000000)) -le "$bound" ] || why="$why; new view $(((hi - a) / 1000000)) ms after the link went down, over $bound ms"
	else
		why="$why; no survivor reported a new view"
	fi
	report "linkdown, shrink, in-band (peers, no mpirun): host 4's link dropped silently mid-job"
fi

part_row() { # description groups size majority -- minority
	d=$1 g=$2
	shift 2
	t0=$(date +%s)
	launch 8
	sleep 1
	# shellcheck disable=SC2086
	"$NETNS" "$C" partition $g
	cut=$(now)
	# the minority's ranks: those after --
	m=$(echo "$*" | sed 's/.*-- //')
	# shellcheck disable=SC2086
	wait_exit $m
	"$NETNS" "$C" heal
	healed=$(now)
	check_sides "$cut" "$healed" "$@"
	# shellcheck disable=SC2086
	stops=$(for r in $m; do echo $((($(field "$C.r$r" at) - cut) / 1000000)); done | sort -n | paste -sd' ' -)
	echo "     the minority's ranks stopped (EPARTITIONED) $stops ms after the split"
	report "$d"
}
if want part || want part-half; then
	part_row "partition 1,2|3,4, shrink, in-band (peers, no mpirun): hosts 1,2 go on" "1,2 3,4" 4 0 1 2 3 -- 4 5 6 7
fi
if want part; then
	part_row "partition 1,2,3|4, shrink, in-band (peers, no mpirun): hosts 1..3 go on" "1,2,3 4" 6 0 1 2 3 4 5 -- 6 7
fi

echo "cluster tests: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
