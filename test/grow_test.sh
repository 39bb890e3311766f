#!/bin/bash
# SPDX-License-Identifier: MIT
# grow_test.sh BUILD_DIR: a job that shrank grows back (docs/rejoin.md, "Growing back").
#
# Each row runs an example under ftcc-run (FTCC_POLICY=rejoin with
# FTCC_REJOIN_TIMEOUT_MS=0: the survivors go on at once; some rows
# FTCC_POLICY=shrink), SIGKILLs ranks
# from outside at a random moment, waits until the survivors run without
# them, and then starts new incarnations of those ranks by hand (as a
# scheduler would, later), with the job's rendezvous, id and token. Checks:
#   - every process exits 0 before the deadline (a hang is a failure);
#   - every rank, newcomers included, ends with the same model, and every
#     op a newcomer ran has the survivors' digest for that op;
#   - the job's last op has every rank in it (contributors == N);
#   - from the traces (FTCC_TRACE): the lowest survivor ran at most 2 ops
#     short of ranks that ended after the last newcomer asked to be taken
#     in (3 for train_steps, whose broadcasts postpone a grow by one op),
#     and says how many after its ft_init began.
# Rows with a twist: a newcomer SIGKILLed while it waits to be taken in (the
# job goes on without it, and later takes its next incarnation); a survivor
# SIGKILLed as the newcomers arrive; steps of several collectives, resumed
# mid-step (train_steps), rank 0 (the broadcasts' root) lost; a job of
# reduce-scatters only, which takes no newcomer (its ops' blocks are fixed
# for the view the program knew): it never fails, and the newcomer's
# ft_init ends with FT_EENDED with the job; programs at odds at the grow's
# op; a forged newcomer record; sharded state (its shard from its files, and
# from its holder's memory with FTCC_CKPT_WHERE=peer); tcp;ofi_rxm; the
# in-band membership (ftcc-run's store: no rendezvous directory).
set -u
B=${1:?usage: grow_test.sh BUILD_DIR}
PY=/usr/bin/python3
DEADLINE=${GROW_DEADLINE:-90}
TRIALS=${GROW_TRIALS:-1}
[ -x "$PY" ] || PY=python3
for p in examples/train_rejoin examples/train_steps examples/train_sharded test/grow_rank; do
	[ -x "$B/$p" ] || { echo "grow_test.sh: $B/$p is not built (make $B/$p)" >&2; exit 1; }
done
tmp=$(mktemp -d /tmp/ftcc-grow.XXXXXX)
trap 'kill $(jobs -p) 2>/dev/null; [ -n "${GROW_KEEP:-}" ] || rm -rf "$tmp"' EXIT
fails=0 rows=0 ran=0

say() { printf '%s\n' "$*"; }

# ops FILE...: "op digest" of every op line, without prefixes
ops() { sed -n 's/^\(\[[^]]*\] \)\{0,1\}op \([0-9]*\) digest \([0-9a-f]*\) .*$/\2 \3/p' "$@"; }

# wait_for FILE PATTERN SECONDS
wait_for() {
	local end=$((SECONDS + $3))
	while ! grep -q -- "$2" "$1" 2>/dev/null; do
		[ $SECONDS -ge $end ] && return 1
		sleep 0.05
	done
}

# row NAME N PROG "ARGS" "KILLED" [TWIST]
# TWIST: newcomer-dies (the first newcomer is SIGKILLed while it waits, and
# started again), survivor-dies (rank 1 SIGKILLed as the newcomers start).
row() {
	if [ -n "$only" ] && [ "$only" != $((rows + 1)) ]; then rows=$((rows + 1)); return; fi
	ran=$((ran + 1))
	local name=$1 n=$2 prog=$3 args=$4 killed=$5 twist=${6:-} d rc=0 why=""
	rows=$((rows + 1))
	d=$tmp/$rows
	mkdir -p "$d/rv" "$d/trace"
	export FTCC_RENDEZVOUS=$d/rv FTCC_JOB_ID=grow-$rows-$$ FTCC_POLICY=${POLICY:-rejoin}
	export FTCC_REJOIN_TIMEOUT_MS=0 FTCC_LOG_DIR=$d/logs FTCC_LOG_LEVEL=2 FTCC_CKPT_DIR=$d/ckpt
	unset FTCC_STORE # (the last row's newcomers': ftcc-run serves one of its own)
	FTCC_TOKEN=$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')
	export FTCC_TOKEN
	local at kills=""
	at=$(awk -v s="$RANDOM" 'BEGIN { srand(s); printf "%.2f", 0.4 + rand() * 0.8 }')
	for r in $killed; do kills="$kills --kill $r@$at"; done
	# shellcheck disable=SC2086
	FTCC_TRACE="$d/trace/rank%r.json" timeout "$DEADLINE" "$B/ftcc-run" -n "$n" --ignore-killed \
		$kills "$B/examples/$prog" $args >"$d/surv.out" 2>&1 &
	local sp=$! short=$((n - $(echo "$killed" | wc -w))) low=0
	while echo " $killed " | grep -q " $low "; do low=$((low + 1)); done
	# the lowest survivor's trace (flushed every 100 ms) shows an op run
	# short of the killed ranks (killed inside ft_init, the job's first
	# view already lacks them)
	if ! wait_for "$d/trace/rank$low.json" "\"contributors\":$short," 30; then
		why="the survivors never ran without the killed ranks"
	fi
	if [ "${FTCC_MEMBERSHIP:-}" = inband ] && [ -z "$why" ]; then
		# the newcomers find the job through ftcc-run's address store, as
		# its ranks did: its address from a survivor's environment
		FTCC_STORE=$(pgrep -f "$B/examples/$prog" | while read -r p; do
			tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx "FTCC_JOB_ID=grow-$rows-$$" &&
				tr '\0' '\n' <"/proc/$p/environ" | sed -n 's/^FTCC_STORE=//p'
		done | head -1)
		export FTCC_STORE
		[ -n "$FTCC_STORE" ] || why="no survivor shows ftcc-run's store"
	fi
	local pids="" first=1
	for r in $killed; do
		if [ -z "$why" ] && [ "$twist" = newcomer-dies ] && [ $first = 1 ]; then
			# (no timeout wrapper: the process itself is killed)
			FTCC_RANK=$r FTCC_WORLD_SIZE=$n FTCC_INCARNATION=1 \
				"$B/examples/$prog" $args >"$d/dead$r.out" 2>&1 &
			local dp=$!
			# killed once it asked to be taken in: at once (before a
			# view takes it), or up to 90 ms later (mostly after)
			wait_for "$d/dead$r.out" "asks back" 10
			[ $((RANDOM % 2)) = 0 ] && sleep 0.0$((RANDOM % 10))
			kill -KILL $dp 2>/dev/null
			wait $dp 2>/dev/null
		fi
		first=0
	done
	for r in $killed; do
		[ -n "$why" ] && break
		FTCC_TRACE="$d/trace/new$r.json" FTCC_RANK=$r FTCC_WORLD_SIZE=$n FTCC_INCARNATION=2 \
			timeout "$DEADLINE" "$B/examples/$prog" $args >"$d/new$r.out" 2>&1 &
		pids="$pids $!"
	done
	if [ "$twist" = survivor-dies ] && [ -z "$why" ]; then
		sleep 0.0$((RANDOM % 10))
		local victim
		victim=$(pgrep -f "$B/examples/$prog" | while read -r p; do
			tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx "FTCC_RANK=1" &&
				tr '\0' '\n' <"/proc/$p/environ" | grep -qx "FTCC_JOB_ID=grow-$rows-$$" && echo "$p"
		done | head -1)
		[ -n "$victim" ] && kill -KILL "$victim"
	fi
	# (survivor-dies: ftcc-run reports rank 1's death; the models say the rest)
	wait $sp || { rc=$?; [ "$twist" = survivor-dies ] || why="${why:-ftcc-run exited $rc}"; }
	for p in $pids; do
		if [ "$twist" = never ]; then
			# a job of reduce-scatters takes no newcomer: it waits, and its
			# ft_init fails with FT_EENDED once the job has ended
			wait "$p" && why="${why:-a newcomer was taken in by a job of reduce-scatters}"
		else
			wait "$p" || { rc=$?; why="${why:-a newcomer exited $rc}"; }
		fi
	done
	if [ "$twist" = never ] && [ -z "$why" ] &&
		! grep -q "^ft_init: .*ended" "$d"/new*.out; then
		why="the newcomer did not fail with FT_EENDED"
	fi
	# every finisher's model, the same
	local models
	models=$(cat "$d/surv.out" "$d"/new*.out 2>/dev/null | sed -n 's/^\(\[[^]]*\] \)\{0,1\}model \([0-9a-f]*\)$/\2/p' | sort | uniq -c)
	local want=$n
	[ "$twist" = survivor-dies ] && want=$((n - 1))
	[ "$twist" = never ] && want=$((n - $(echo "$killed" | wc -w)))
	if [ "$prog" = train_sharded ]; then
		# no model digest: each rank checks its own shard, the newcomers
		# the blocks their checkpoint gave back
		local shards restored
		shards=$(cat "$d/surv.out" "$d"/new*.out | grep -c "shard ok;")
		restored=$(cat "$d"/new*.out | grep -c "rejoined at op [0-9]*: restored ok")
		[ -n "$why" ] || [ "$shards" = "$want" ] || why="$shards of $want ranks end with shard ok"
		[ -n "$why" ] || [ "$restored" = "$(echo "$killed" | wc -w)" ] ||
			why="$restored newcomers had their shard restored ok"
		# killed after 0.4 s of 10 ms steps: its rounds had committed
		[ -n "$why" ] || ! cat "$d"/new*.out | grep -q "restored ok: 0 blocks" ||
			why="a newcomer restored no block"
		[ -n "$why" ] || [ "${FTCC_CKPT_WHERE:-}" != peer ] ||
			[ "$(find "$d/ckpt" -type f 2>/dev/null | wc -l)" = 0 ] ||
			why="peer checkpoints wrote a file"
	elif [ -z "$why" ] && { [ "$(echo "$models" | wc -l)" != 1 ] || [ "$(echo "$models" | awk '{print $1}')" != "$want" ]; }; then
		why="final models differ or are missing: $models"
	fi
	# a newcomer's ops have the survivors' digests
	if [ -z "$why" ] && [ "$prog" != train_sharded ] && [ "$twist" != never ]; then
		ops "$d/surv.out" | sort -u >"$d/surv.ops"
		for r in $killed; do
			ops "$d/new$r.out" | sort -u >"$d/new$r.ops"
			if [ -n "$(comm -23 "$d/new$r.ops" "$d/surv.ops")" ]; then
				why="rank $r's new incarnation has digests the survivors do not"
			fi
			if ! [ -s "$d/new$r.ops" ]; then
				why="rank $r's new incarnation ran no op"
			fi
		done
	fi
	# the job's last op (the highest op number any rank printed) had every
	# rank, on every rank that printed it
	local last
	last=$(cat "$d/surv.out" "$d"/new*.out |
		sed -n 's/^\(\[[^]]*\] \)\{0,1\}op \([0-9]*\) .* contributors \([0-9]*\)$/\2 \3/p' |
		sort -n -k1,1 | awk '{ op[NR] = $1; n[NR] = $2 } END {
			for (i = NR; i > 0 && op[i] == op[NR]; i--) if (n[i] != n[NR]) { print "mixed"; exit }
			print n[NR] }')
	if [ -z "$why" ] && [ "$twist" != survivor-dies ] && [ "$twist" != never ] &&
		[ "$prog" != train_sharded ] && [ "$last" != "$n" ]; then
		why="the job's last op ran with ${last:-no} contributors, not $n"
	fi
	if [ -z "$why" ] && [ "$twist" != survivor-dies ] && [ "$twist" != never ]; then
		local short_ops
		short_ops=$("$PY" "$(dirname "$0")/grow_ops.py" "$n" "$d/trace/rank$low.json" \
			"$d"/trace/new*.json 2>&1) || short_ops="trace unreadable: $short_ops"
		set -- $short_ops
		# at most the op under way and the next; train_steps: one more
		# when the grow lands on a broadcast, which postpones it
		local most=2
		[ "$prog" = train_steps ] && most=3
		case "$#:${1:-}:${2:-}" in
		2:[0-9]*:[0-9]*) [ "$1" -le "$most" ] ||
			why="rank $low ran $1 ops short after the newcomers asked to come back" ;;
		*) why="$short_ops" ;;
		esac
		name="$name (ops short after the newcomers asked: ${1:-?}, after their ft_init began: ${2:-?})"
	fi
	if [ -n "$why" ]; then
		say "FAIL  $name: $why"
		for f in "$d"/*.out; do say "--- $f"; tail -20 "$f"; done
		fails=$((fails + 1))
	else
		say "ok    $name"
	fi
}

# verdict NAME WHY OUTPUT: a row of its own passes (WHY empty) or fails
verdict() {
	if [ -n "$2" ]; then
		say "FAIL  $1: $2"
		tail -30 "$3"
		fails=$((fails + 1))
	else
		say "ok    $1"
	fi
}

# A bug at the grow's op: rank 2's program calls a reduce-scatter where the
# others call an allreduce (test/grow_rank.c); the grow is planned there,
# since the job's earlier ops (reduce-scatters) took no newcomer. Every
# member, the newcomer included, must fail that op, before the deadline.
mismatch_row() {
	if [ -n "$only" ] && [ "$only" != $((rows + 1)) ]; then rows=$((rows + 1)); return; fi
	rows=$((rows + 1)) ran=$((ran + 1))
	local d=$tmp/$rows name="4 ranks, programs at odds at the grow's op: every member fails it" why="" failed
	mkdir -p "$d"
	(
		unset FTCC_RENDEZVOUS FTCC_JOB_ID FTCC_TOKEN
		export FTCC_POLICY=shrink FTCC_LOG_LEVEL=2
		timeout "$DEADLINE" "$B/ftcc-run" -n 4 --restart --max-restarts 1 \
			"$B/test/grow_rank" 40 10 >"$d/out" 2>&1
	) || why="ftcc-run exited $? (124: a hang)"
	failed=$(grep -c '^\[[0-3]\] op 40 rc FT_E' "$d/out")
	grep -q '^\[3\] rank 3 taken back at op 40$' "$d/out" || why="${why:-the newcomer was not taken back at op 40}"
	[ "$failed" = 4 ] || why="${why:-$failed of 4 members failed op 40}"
	verdict "$name ($(sed -n 's/^\[0\] op 40 rc //p' "$d/out"))" "$why" "$d/out"
}

# A forged newcomer: a rejoining record nobody published (a live process's
# pid, an address nothing listens at) dropped into the rendezvous's next
# generation of a job that shrank. The survivors may take it in; linking to
# it fails, and it is a failure like any other: no survivor is lost, every
# one ends with the same model.
forged_row() {
	if [ -n "$only" ] && [ "$only" != $((rows + 1)) ]; then rows=$((rows + 1)); return; fi
	rows=$((rows + 1)) ran=$((ran + 1))
	local d=$tmp/$rows name="4 ranks, 3 killed; a forged newcomer record in the rendezvous" why=""
	local job=forged-$rows-$$ g sp models
	mkdir -p "$d/rv"
	FTCC_RENDEZVOUS=$d/rv FTCC_JOB_ID=$job FTCC_POLICY=shrink FTCC_LOG_LEVEL=2 \
		timeout "$DEADLINE" "$B/ftcc-run" -n 4 --ignore-killed --kill 3@0.5 \
		"$B/examples/train_rejoin" 300 1000 10 >"$d/out" 2>&1 &
	local run=$!
	wait_for "$d/out" "settled: 3 members" 30 || why="the survivors never ran without rank 3"
	g=$(find "$d/rv/$job" -maxdepth 2 -name view -path '*/gen-*' 2>/dev/null |
		sed 's|.*/gen-\([0-9]*\)/view|\1|' | sort -n | tail -1)
	sleep 100 &
	sp=$!
	mkdir -p "$d/rv/$job/gen-$((g + 1))"
	printf '127.0.0.1:1 %d %s - 0 1\n' "$sp" "$(hostname)" >"$d/rv/$job/gen-$((g + 1))/.forged"
	mv "$d/rv/$job/gen-$((g + 1))/.forged" "$d/rv/$job/gen-$((g + 1))/member-3"
	wait $run || why="${why:-ftcc-run exited $?}"
	kill $sp 2>/dev/null
	wait $sp 2>/dev/null
	models=$(sed -n 's/^\[[0-2]\] model \([0-9a-f]*\)$/\1/p' "$d/out" | sort | uniq -c)
	[ -n "$why" ] || [ "$(echo "$models" | awk '{print $1}')" = 3 ] ||
		why="the 3 survivors' models differ or are missing: $models"
	verdict "$name (rank 0 took it in $(grep -c '^\[0\].*takes rank 3 back' "$d/out") time(s), then went on without it)" \
		"$why" "$d/out"
}

only=${GROW_ONLY:-}
for t in $(seq 1 "$TRIALS"); do
	row "8 ranks, 6 and 7 killed, both come back" 8 train_rejoin "300 1000 10" "6 7"
	row "4 ranks, 2 killed and back: steps of several collectives" 4 train_steps "300 4096 10" "2"
	row "4 ranks, 0 killed and back: the broadcasts' root (place 0) lost and back" 4 train_steps \
		"300 4096 10" "0"
	row "4 ranks of reduce-scatters only, 2 killed: no op takes it back, it ends with FT_EENDED" 4 \
		train_rejoin "150 1000 10 rs" "2" never
	mismatch_row
	forged_row
	row "4 ranks, 1 killed and back: sharded state, its shard from its running checkpoint" 4 \
		train_sharded "300 16384 10" "1"
	export FTCC_CKPT_WHERE=peer
	row "4 ranks, 1 killed and back: sharded state, its shard from its holder's memory (no file)" 4 \
		train_sharded "300 16384 10" "1"
	unset FTCC_CKPT_WHERE
	row "5 ranks, 3 killed; its first newcomer dies waiting, the next comes in" 5 train_rejoin "300 1000 10" "3" newcomer-dies
	row "6 ranks, 4 and 5 back while survivor 1 dies" 6 train_rejoin "300 1000 10" "4 5" survivor-dies
	POLICY=shrink row "shrink: 8 ranks, 6 and 7 killed, both come back" 8 train_rejoin "300 1000 10" "6 7"
	POLICY=shrink row "shrink: 4 ranks, 2 killed and back: steps of several collectives" 4 \
		train_steps "300 4096 10" "2"
	export FTCC_TRANSPORT=fabric FI_PROVIDER="tcp;ofi_rxm"
	row "8 ranks over tcp;ofi_rxm, 5 killed and back" 8 train_rejoin "300 1000 10" "5"
	unset FTCC_TRANSPORT FI_PROVIDER
	# no shared file system: views settled in-band, the newcomers find the
	# job through ftcc-run's store, shards from the holders' memory
	export FTCC_MEMBERSHIP=inband
	row "in-band: 8 ranks, 6 and 7 killed, both come back" 8 train_rejoin "300 1000 10" "6 7"
	POLICY=shrink row "in-band, shrink: 4 ranks, 2 killed and back: steps of several collectives" 4 \
		train_steps "300 4096 10" "2"
	FTCC_CKPT_WHERE=peer row "in-band: 4 ranks, 1 killed and back: its shard from its holder's memory" \
		4 train_sharded "300 16384 10" "1"
	row "in-band: 5 ranks, 3 killed; its first newcomer dies waiting, the next comes in" 5 \
		train_rejoin "300 1000 10" "3" newcomer-dies
	row "in-band: 6 ranks, 4 and 5 back while survivor 1 dies" 6 train_rejoin "300 1000 10" "4 5" \
		survivor-dies
	unset FTCC_MEMBERSHIP FTCC_STORE
done
say "grow: $((ran - fails)) of $ran rows passed"
[ $fails = 0 ]
