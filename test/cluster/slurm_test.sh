#!/bin/sh
# SPDX-License-Identifier: MIT
# slurm_test.sh BUILD_DIR: ftcc jobs under Slurm's srun on a real Slurm cluster of 5 namespace hosts (4 x 2 ranks and a spare): the collectives matrix, a whole host killed under shrink, exact rejoin on the spare host, growing back onto it, a partition.
#
# The cluster: netns.sh makes 5 hosts, slurm.sh starts munged, slurmctld
# (host 1) and a slurmd per host. Every job is started by srun from host 1,
# under a deadline (a hang is a failure), and no rank is given a rank, a
# size or an address: ftcc reads Slurm's variables (SLURM_PROCID,
# SLURM_STEP_NUM_TASKS, srun's address). Rows:
#   matrix-pmix      srun --mpi=pmix: test/tsan_rank's collectives matrix
#                    (dtypes, ops, counts, in place, broadcast from every
#                    root, barriers), each rank checking its results; in-band
#                    membership and PMIx chosen because the step spans hosts
#                    (no FTCC_* set but the transport); over TCP, then
#                    libfabric tcp;ofi_rxm;
#   matrix-file      srun --mpi=none: allreduce_check with the file
#                    rendezvous in a directory every host sees (ftcc's own
#                    bootstrap from Slurm's environment);
#   kill             srun --no-kill --mpi=pmix, FTCC_POLICY=shrink: host 4
#                    (ranks 6, 7 and its slurmd) SIGKILLed once every rank
#                    runs; the six survivors finish exactly (tsan_rank shrink
#                    checks every result against the members left); then
#                    the job is cancelled (srun would wait SlurmdTimeout for
#                    Slurm to declare the node dead) and host 4's slurmd is
#                    started again;
#   rejoin           FTCC_POLICY=rejoin, file rendezvous and logs in shared
#                    directories (a shared file system), train_rejoin: host 4
#                    killed mid-job, its ranks 6 and 7 started again on host
#                    5 by a second srun (FTCC_RANK=6+SLURM_PROCID,
#                    FTCC_INCARNATION=1); every op any incarnation prints
#                    has the digest of a failure-free srun run of the same
#                    job, and every rank ends with its model. The time from
#                    the replacement's srun start to its end is printed;
#   rejoin-nolog     the same with each host's log directory its own: the
#                    replacements find no log on host 5 and rejoin through
#                    the application (train_rejoin recomputes the
#                    interrupted op's input from the model a survivor
#                    sends), still exact;
#   rejoin-inband    the same with no shared file system at all: in-band
#                    membership from a peer list (FTCC_PEERS, ports of the
#                    trial's own), each host's logs its own; the
#                    replacements' peer list names host 5 for ranks 6 and 7,
#                    and they find the job by asking its ranks (docs/rejoin.md,
#                    "Over in-band membership"); exact as above. The
#                    time from the kill to the interrupted op's return on
#                    every rank is printed (test/rejoin_time.py, from the
#                    traces); SLURM_REJOIN_COUNT sets the model's floats
#                    (100000; the issue's bar: 16777216, 64 MiB);
#   rejoin-shard     sharded state (train_sharded) with its running
#                    checkpoints in peers' memory (FTCC_CKPT_WHERE=peer),
#                    in-band from a peer list, no file anywhere: ranks 6
#                    and 7 started again on host 5 restore their whole
#                    shards from host 1's memory; every shard exact;
#   grow             rejoin with FTCC_REJOIN_TIMEOUT_MS=0: host 4 killed
#                    mid-job, the 6 survivors go on alone; then ranks 6 and
#                    7 are started on host 5 and taken back at the job's next
#                    op: every rank ends with the same model, the last op has
#                    8 contributors, and the traces show at most 2 ops short
#                    of ranks after the newcomers asked (test/grow_ops.py);
#   part             srun --no-kill --mpi=pmix, shrink, in-band: the switch
#                    split 1,2 | 3,4 mid-job (test/part_rank, each rank's
#                    lines to a file of its own): hosts 1 and 2 go on with 4
#                    ranks and exact results, the ranks of hosts 3 and 4
#                    stop with EPARTITIONED or EXCLUDED and no result after
#                    the split.
# SLURM_REJOIN_STEPS sets the rejoin and grow jobs' steps (300).
# SLURM_ROWS picks rows (default all), SLURM_TRIALS repeats the matrix, kill
# and rejoin rows (1), SLURM_DEADLINE is each job's deadline in s (60),
# SLURM_LOGS=DIR keeps the daemons' logs (slurmctld, each slurmd and its
# slurmstepds), the rows' traces (FTCC_TRACE) and the last row's output there.
# Exit 0 all passed, 1 a row failed, 77 skipped (not root, no namespaces, no
# Slurm): SKIPPED says why.
set -eu
B=$(cd "$1" && pwd)
HERE=$(cd "$(dirname "$0")" && pwd)
NETNS=$HERE/netns.sh
SLURM=$HERE/slurm.sh
DEADLINE=${SLURM_DEADLINE:-60}
ROWS=${SLURM_ROWS:-matrix-pmix matrix-file kill rejoin rejoin-nolog rejoin-inband rejoin-shard grow part}
COUNT=${SLURM_REJOIN_COUNT:-100000}
TRIALS=${SLURM_TRIALS:-1}

for p in slurmctld slurmd srun munged; do
	command -v "$p" >/dev/null 2>&1 || { echo "SKIPPED: Slurm tests: $p is not installed (scripts/deps.sh slurmctld slurmd slurm-client munge)"; exit 77; }
done
for p in examples/allreduce_check examples/train_rejoin examples/train_sharded test/tsan_rank test/part_rank; do
	[ -x "$B/$p" ] || { echo "slurm_test.sh: $B/$p is not built (make $B/$p)" >&2; exit 1; }
done
C=$(mktemp -d "${TMPDIR:-/tmp}/ftcc-slurm.XXXXXX")
OUT=$C.out
SHARED=$C.shared
cleanup() {
	if [ -f "$C/cluster" ]; then "$SLURM" "$C" stop >/dev/null 2>&1 || true; fi
	if [ -n "${SLURM_LOGS:-}" ]; then
		mkdir -p "$SLURM_LOGS" || true
		cp "$C"/slurm/*.log "$OUT.last" "$SLURM_LOGS"/ 2>/dev/null || true
	fi
	"$NETNS" "$C" destroy || true
	rm -rf "$OUT" "$OUT.last" "$OUT.new" "$OUT.ops" "$C" "$C".r? "$C.ref.ops" "$SHARED"
}
trap cleanup EXIT
trap 'exit 1' INT TERM
rc=0
"$NETNS" "$C" create 5 >/dev/null || rc=$?
if [ "$rc" -ne 0 ]; then
	rmdir "$C" 2>/dev/null || true
	exit "$rc"
fi
rc=0
"$SLURM" "$C" start || rc=$?
[ "$rc" -eq 0 ] || exit "$rc"
unset FTCC_BIND_HOST FTCC_RENDEZVOUS FTCC_MEMBERSHIP FTCC_BOOTSTRAP FTCC_PEERS FTCC_STORE \
	FTCC_RANK FTCC_WORLD_SIZE FTCC_JOB_ID FTCC_POLICY FTCC_LOG_DIR FTCC_TRANSPORT FI_PROVIDER
mkdir -p "$SHARED"

run_in() { # [VAR=VALUE...] COMMAND...: in host 1 (srun, with its environment), under the deadline
	timeout -k 5 "$DEADLINE" "$SLURM" "$C" run env "$@"
}

pass=0 fail=0
verdict() { # STATUS OK-DETAIL FAIL-DETAIL (the row's description: $d, its start: $t0)
	if [ "$1" -eq 0 ]; then
		pass=$((pass + 1))
		echo "ok   $d$2 ($(($(date +%s) - t0)) s)"
	else
		fail=$((fail + 1))
		echo "FAIL $d: $3 ($(($(date +%s) - t0)) s)"
		sed 's/^/     /' "$OUT" | grep -v "ftcc\[[0-9]*\] \(info\|debug\)" | tail -40
	fi
	# the next row's output starts empty: its job truncates $OUT only once
	# started, and a row waiting for lines must not count this row's
	if [ -n "${SLURM_LOGS:-}" ]; then # the rows' traces too
		mkdir -p "$SLURM_LOGS" && cp -r "$SHARED"/trace-* "$SLURM_LOGS"/ 2>/dev/null || true
	fi
	rm -rf "${SHARED:?}"/*
	mv -f "$OUT" "$OUT.last" 2>/dev/null || true
}
want() { case " $ROWS " in *" $1 "*) return 0 ;; *) return 1 ;; esac; }
fabric() { command -v fi_info >/dev/null 2>&1 && fi_info -p "$1" >/dev/null 2>&1; }
now_ms() { echo $(($(date +%s%N) / 1000000)); }

matrix() { # description expected-ok-lines [VAR=VALUE...] srun ARGS...
	d=$1 want=$2
	shift 2
	t0=$(date +%s) st=0
	run_in "$@" >"$OUT" 2>&1 || st=$?
	got=$(grep -c "^ok \|: correct," "$OUT" || true)
	ok=1
	[ "$st" -eq 0 ] && [ "$got" -eq "$want" ] && ok=0
	verdict $ok "" "srun exit $st, $got of $want ok lines"
}

# wait_lines FILE PATTERN COUNT [SECONDS]: until FILE has COUNT lines matching (10 s at most)
wait_lines() {
	t=0
	# (a file not there yet counts 0)
	while n=$(grep -c "$2" "$1" 2>/dev/null || true) && [ "${n:-0}" -lt "$3" ] &&
		[ "$t" -lt $((${4:-10} * 10)) ]; do
		sleep 0.1
		t=$((t + 1))
	done
}

# end_job SRUN-PID: the job's ranks are done (what is judged); Slurm learns
# of a dead node only after SlurmdTimeout, and srun waits for it: the job
# is cancelled instead, and its srun waited for
end_job() {
	for j in $(run_in squeue -h -o %i 2>/dev/null); do run_in scancel "$j" || true; done
	wait "$1" || true
}

kill_row() {
	d="kill: srun --no-kill, shrink, in-band (PMIx): host 4 killed mid-job"
	t0=$(date +%s) st=0
	run_in FTCC_POLICY=shrink srun --no-kill -N4 -n8 -w h1,h2,h3,h4 --mpi=pmix "$B/test/tsan_rank" shrink 2 30 \
		100000 >"$OUT" 2>&1 &
	job=$!
	wait_lines "$OUT" "^running pid" 8
	started=$(grep -c "^running pid" "$OUT" || true)
	"$NETNS" "$C" kill 4
	k=$(now_ms)
	wait_lines "$OUT" "^ok shrink rank\|^err\|WRONG" 6 "$DEADLINE"
	e=$(now_ms)
	end_job "$job"
	got=$(grep -c "^ok shrink rank [0-5] size 6 " "$OUT" || true)
	"$SLURM" "$C" slurmd 4 >>"$OUT" 2>&1 || st=1
	ok=1
	[ "$got" -eq 6 ] && [ "$started" -eq 8 ] && [ "$st" -eq 0 ] && ok=0
	verdict $ok ": 6 survivors exact, done $((e - k)) ms after the kill, host 4's slurmd back" \
		"$got of 6 survivors ok, $started of 8 ranks were running at the kill, slurmd $st"
}

# "op digest contributors" and "rank model" lines of srun --label output
ops() { sed -n 's/^ *[0-9]*: op \([0-9]*\) digest \([0-9a-f]*\) contributors \([0-9]*\)$/\1 \2 \3/p' "$@" | sort -u; }
models() { sed -n 's/^ *[0-9]*: model \([0-9a-f]*\)$/\1/p' "$@"; }
STEPS=${SLURM_REJOIN_STEPS:-300}
REF_OPS=$C.ref.ops
rejoin_env() { # JOB srun ARGS...: in host 1 with the rejoin job's environment
	j=$1
	shift
	run_in FTCC_POLICY=rejoin FTCC_RENDEZVOUS="$SHARED/rdv" FTCC_LOG_DIR="$SHARED/logs" \
		FTCC_REJOIN_TIMEOUT_MS=20000 FTCC_LOG_LEVEL=2 FTCC_JOB_ID="$j" "$@"
}
rejoin_ref() {
	d="rejoin: the failure-free run"
	t0=$(date +%s) st=0
	rejoin_env "ref$$" srun -N4 -n8 -w h1,h2,h3,h4 --mpi=none --label "$B/examples/train_rejoin" \
		"$STEPS" "$COUNT" 5 >"$OUT" 2>&1 || st=$?
	ops "$OUT" >"$REF_OPS"
	REF_MODEL=$(models "$OUT" | sort -u)
	ok=1
	[ "$st" -eq 0 ] && [ "$(cut -d' ' -f1 "$REF_OPS" | sort -u | wc -l)" -eq "$STEPS" ] &&
		[ "$(models "$OUT" | wc -l)" -eq 8 ] && [ "$(echo "$REF_MODEL" | wc -l)" -eq 1 ] && ok=0
	verdict $ok "" "exit $st, $(wc -l <"$REF_OPS") op lines, models: $(echo "$REF_MODEL" | tr '\n' ' ')"
}
# RANKS: each rank's log directory is FTCC_LOG_DIR, or, LOGS=local, a
# directory of its host's own (no log reaches another host)
# shellcheck disable=SC2016
RANK_LOGS='[ "$LOGS" = local ] && FTCC_LOG_DIR=$FTCC_LOG_DIR-$(hostname); export FTCC_LOG_DIR; exec "$0" "$@"'
# on_spare JOB [VAR=VALUE...]: ranks 6 and 7 started again on host 5 by a
# second srun (its output in $OUT.new, its status in st2, its end in e),
# then the main srun ($main) ended once 6 ranks printed their model, and
# host 4's slurmd started again (st)
on_spare() {
	j=$1
	shift
	# shellcheck disable=SC2016
	rejoin_env "$j" "$@" srun -w h5 -N1 -n2 --mpi=none --label sh -c \
		'FTCC_RANK=$((6 + SLURM_PROCID)) FTCC_WORLD_SIZE=8 FTCC_INCARNATION=1 exec sh -c "$0" "$@"' \
		"$RANK_LOGS" "$B/examples/train_rejoin" "$STEPS" "$COUNT" 5 >"$OUT.new" 2>&1 || st2=$?
	e=$(now_ms)
	wait_lines "$OUT" ": model " 6 "$DEADLINE"
	end_job "$main"
	"$SLURM" "$C" slurmd 4 >>"$OUT" 2>&1 || st=1
}
# peers SPARE: a peer list of 8 ranks, two a host on hosts 1 to 4 (ranks 6
# and 7 on host SPARE), at ports of this trial's own
peers() {
	l=""
	for r in 0 1 2 3 4 5 6 7; do
		h=$((r / 2 + 1))
		[ "$h" -eq 4 ] && h=$1
		l="$l,$("$NETNS" "$C" addr "$h"):$((PORT + r))"
	done
	echo "${l#,}"
}
rejoin_row() { # TRIAL LOGS(shared|local|inband)
	case $2 in
	shared) d="rejoin: srun --no-kill, host 4 killed, ranks 6 and 7 started again on host 5 (logs on a shared file system)" ;;
	local) d="rejoin-nolog: the same, each host's logs its own (the replacement has none: the application path)" ;;
	*) d="rejoin-inband: the same with in-band membership from a peer list, no shared file system, a model of $COUNT floats" ;;
	esac
	t0=$(date +%s) st=0 st2=0
	job=rj$$-$1-$2
	logs=$2 main_env="" spare_env="" trace=""
	if [ "$2" = inband ]; then
		PORT=$((20000 + $(od -An -N2 -tu2 /dev/urandom) % 20000))
		logs=local trace=$SHARED/trace-$job
		mkdir -p "$trace"
		tok="FTCC_TOKEN=$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')"
		main_env="FTCC_MEMBERSHIP=inband FTCC_BOOTSTRAP=peers FTCC_PEERS=$(peers 4) $tok FTCC_TRACE=$trace/rank.json"
		spare_env="FTCC_MEMBERSHIP=inband FTCC_BOOTSTRAP=peers FTCC_PEERS=$(peers 5) $tok FTCC_TRACE=$trace/new.json"
	fi
	# shellcheck disable=SC2086
	rejoin_env "$job" LOGS="$logs" $main_env srun --no-kill -N4 -n8 -w h1,h2,h3,h4 --mpi=none --label \
		sh -c "$RANK_LOGS" "$B/examples/train_rejoin" "$STEPS" "$COUNT" 5 >"$OUT" 2>&1 &
	main=$!
	# a random op between 20 and 119 once every rank runs
	at=$((20 + $(od -An -N2 -tu2 /dev/urandom) % 100))
	[ "$COUNT" -le 100000 ] || at=$((5 + at % 10))
	wait_lines "$OUT" ": op $at digest" 8 "$DEADLINE"
	"$NETNS" "$C" kill 4
	k=$(now_ms)
	# shellcheck disable=SC2086
	on_spare "$job" LOGS="$logs" $spare_env
	cat "$OUT.new" >>"$OUT"
	why=""
	took=""
	if [ -n "$trace" ]; then
		# shellcheck disable=SC2046
		took=$("$HERE/../rejoin_time.py" "$k" $(ls "$trace"/rank.[0-5].json) -- $(ls "$trace"/new.*.json) 2>&1) ||
			why="rejoin_time.py: $took"
	fi
	bad=$(ops "$OUT" | awk '$3 == 8' | sort -u | comm -13 "$REF_OPS" - | head -3 | tr '\n' ';')
	[ -z "$bad" ] || why="ops at 8 contributors that differ from the failure-free run: $bad"
	lossy=$(ops "$OUT" | awk '$3 != 8' | wc -l)
	[ "$lossy" -eq 0 ] || why="$why; $lossy ops with fewer contributors"
	[ "$(models "$OUT" | wc -l)" -eq 8 ] || why="$why; $(models "$OUT" | wc -l) of 8 ranks ended with a model"
	! models "$OUT" | grep -qv "^$REF_MODEL$" || why="$why; a model differs from the failure-free one"
	[ "$(grep -c "rejoined: the job stands" "$OUT.new" || true)" -eq 2 ] || why="$why; ranks 6 and 7 did not both rejoin"
	[ "$st" -eq 0 ] && [ "$st2" -eq 0 ] || why="$why; slurmd $st, the restarted ranks' srun exit $st2"
	nolog=$(grep -c "no usable log" "$OUT.new" || true)
	if [ "$2" != shared ] && [ "$nolog" -ne 2 ]; then
		why="$why; the replacements found a log on host 5 ($nolog of 2 said none)"
	elif [ "$2" = shared ] && [ "$nolog" -ne 0 ]; then
		why="$why; the replacements found no log on the shared file system"
	fi
	stood=$(sed -n 's/.*rejoined: the job stands at op \([0-9]*\).*/\1/p' "$OUT.new" | head -1)
	rm -f "$OUT.new"
	ok=1
	[ -n "$why" ] || ok=0
	verdict $ok ": killed after op $at, rejoined at op ${stood:-?}, every op and model as the failure-free run;${took:+ $took;} the replacement's srun (start, rejoin, the job's $((STEPS - ${stood:-0})) remaining steps) ended $((e - k)) ms after the kill" \
		"${why#; }"
}

# rejoin-shard: sharded state (examples/train_sharded) with its running
# checkpoints in peers' memory (FTCC_CKPT_WHERE=peer), in-band membership
# from a peer list, each host's logs its own, no file written anywhere:
# host 4 killed once every rank's rounds go to its holder and some 0.3 s
# more; ranks 6 and 7, started again on host 5, find the job, get the
# replicated state from a survivor and their shards from host 1's memory
# (ranks 0 and 1 hold them) over the network (FTCC_CKPT_LOCAL=0: the
# namespace hosts share one kernel), each block the values of one step;
# every rank ends with its shard exact.
shard_row() { # TRIAL
	d="rejoin-shard: in-band rejoin on host 5, the lost host's shards from host 1's memory (FTCC_CKPT_WHERE=peer), no file"
	t0=$(date +%s) st=0 st2=0
	job=rs$$-$1
	PORT=$((20000 + $(od -An -N2 -tu2 /dev/urandom) % 20000))
	tok="FTCC_TOKEN=$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')"
	ck=$SHARED/ck-$job
	# shellcheck disable=SC2086
	rejoin_env "$job" LOGS=local FTCC_MEMBERSHIP=inband FTCC_BOOTSTRAP=peers FTCC_PEERS="$(peers 4)" $tok \
		FTCC_CKPT_WHERE=peer FTCC_CKPT_LOCAL=0 FTCC_CKPT_DIR="$ck" srun --no-kill -N4 -n8 -w h1,h2,h3,h4 --mpi=none --label \
		sh -c "$RANK_LOGS" "$B/examples/train_sharded" 400 65536 5 >"$OUT" 2>&1 &
	main=$!
	wait_lines "$OUT" "rounds go to rank" 8 "$DEADLINE"
	sleep 0.3
	"$NETNS" "$C" kill 4
	k=$(now_ms)
	# shellcheck disable=SC2016,SC2086
	rejoin_env "$job" LOGS=local FTCC_MEMBERSHIP=inband FTCC_BOOTSTRAP=peers FTCC_PEERS="$(peers 5)" $tok \
		FTCC_CKPT_WHERE=peer FTCC_CKPT_LOCAL=0 FTCC_CKPT_DIR="$ck" srun -w h5 -N1 -n2 --mpi=none --label sh -c \
		'FTCC_RANK=$((6 + SLURM_PROCID)) FTCC_WORLD_SIZE=8 FTCC_INCARNATION=1 exec sh -c "$0" "$@"' \
		"$RANK_LOGS" "$B/examples/train_sharded" 400 65536 5 >"$OUT.new" 2>&1 || st2=$?
	e=$(now_ms)
	wait_lines "$OUT" "shard ok;" 6 "$DEADLINE"
	end_job "$main"
	"$SLURM" "$C" slurmd 4 >>"$OUT" 2>&1 || st=1
	# a trial this short ends before slurmctld has seen host 4's slurmd die,
	# so "idle" above says nothing of the new one: a step must run there
	n=0
	until run_in srun -w h4 -N1 -n1 --mpi=none true >/dev/null 2>&1; do
		n=$((n + 1))
		[ "$n" -lt 20 ] || { st=1; break; }
		sleep 0.5
	done
	why=""
	back=$(grep -c "rejoined at op [0-9]*: restored ok: 64 blocks" "$OUT.new" || true)
	[ "$back" -eq 2 ] || why="$back of 2 replacements restored all 64 blocks of their shards"
	[ "$(grep -c "shard ok;" "$OUT" || true)" -eq 6 ] || why="$why; $(grep -c "shard ok;" "$OUT" || true) of 6 survivors exact"
	[ "$(grep -c "shard ok;" "$OUT.new" || true)" -eq 2 ] || why="$why; the replacements' shards not exact at the end"
	! grep -q "BAD\|DIFFERENT" "$OUT" "$OUT.new" || why="$why; a shard held values of no single step"
	[ "$(find "$ck" -type f 2>/dev/null | wc -l)" -eq 0 ] || why="$why; a checkpoint file was written"
	[ "$st" -eq 0 ] && [ "$st2" -eq 0 ] || why="$why; slurmd $st, the replacements' srun exit $st2"
	stood=$(sed -n 's/.*rank 6 rejoined at op \([0-9]*\).*/\1/p' "$OUT.new" | head -1)
	cat "$OUT.new" >>"$OUT"
	rm -f "$OUT.new"
	rm -rf "$ck"
	ok=1
	[ -n "$why" ] || ok=0
	verdict $ok ": ranks 6 and 7 back at op ${stood:-?} with their shards from host 1's memory, every shard exact; the replacements' srun ended $((e - k)) ms after the kill" \
		"${why#; }"
}

# grow: the job goes on without host 4's ranks at once (rejoin timeout 0),
# and their new incarnations, started later on the spare host 5, are taken
# back at the job's next op (docs/rejoin.md, "Growing back")
grow_row() { # TRIAL
	d="grow: srun --no-kill, host 4 killed, the 6 survivors go on; ranks 6 and 7 started later on host 5 are taken back"
	t0=$(date +%s) st=0 st2=0
	job=gr$$-$1
	mkdir -p "$SHARED/trace-$job"
	rejoin_env "$job" LOGS=shared FTCC_REJOIN_TIMEOUT_MS=0 FTCC_TRACE="$SHARED/trace-$job/rank.json" \
		srun --no-kill -N4 -n8 -w h1,h2,h3,h4 --mpi=none --label \
		sh -c "$RANK_LOGS" "$B/examples/train_rejoin" "$STEPS" 100000 5 >"$OUT" 2>&1 &
	main=$!
	at=$((20 + $(od -An -N2 -tu2 /dev/urandom) % 100))
	wait_lines "$OUT" ": op $at digest" 8
	"$NETNS" "$C" kill 4
	wait_lines "$OUT" "contributors 6$" 6
	k=$(now_ms)
	on_spare "$job" LOGS=shared FTCC_REJOIN_TIMEOUT_MS=0 FTCC_TRACE="$SHARED/trace-$job/new.json"
	why=""
	n6=$(ops "$OUT" | awk '$3 == 6' | wc -l)
	[ "$n6" -gt 0 ] || why="no op ran with the 6 survivors alone"
	last=$(ops "$OUT" "$OUT.new" | sort -n | tail -1 | cut -d' ' -f3)
	[ "$last" = 8 ] || why="$why; the last op ran with ${last:-no} contributors, not 8"
	ops "$OUT" >"$OUT.ops"
	[ -z "$(ops "$OUT.new" | comm -23 - "$OUT.ops")" ] ||
		why="$why; a newcomer has a digest the survivors do not"
	rm -f "$OUT.ops"
	[ "$(models "$OUT" "$OUT.new" | wc -l)" -eq 8 ] ||
		why="$why; $(models "$OUT" "$OUT.new" | wc -l) of 8 ranks ended with a model"
	[ "$(models "$OUT" "$OUT.new" | sort -u | wc -l)" -eq 1 ] || why="$why; the models differ"
	[ "$(grep -c "rejoined: the job stands" "$OUT.new" || true)" -eq 2 ] || why="$why; ranks 6 and 7 were not both taken back"
	[ "$st" -eq 0 ] && [ "$st2" -eq 0 ] || why="$why; slurmd $st, the newcomers' srun exit $st2"
	short=$(/usr/bin/python3 "$HERE/../grow_ops.py" 8 "$SHARED/trace-$job/rank.0.json" \
		"$SHARED/trace-$job"/new.[67].json 2>&1) || why="$why; traces: $short"
	set -- $short
	[ $# = 2 ] && [ "$1" -le 2 ] || why="$why; rank 0 ran ${1:-?} ops short after the newcomers asked"
	stood=$(sed -n 's/.*rejoined: the job stands at op \([0-9]*\).*/\1/p' "$OUT.new" | head -1)
	cat "$OUT.new" >>"$OUT"
	rm -f "$OUT.new"
	ok=1
	[ -n "$why" ] || ok=0
	verdict $ok ": killed after op $at, $n6 ops at 6, taken back at op ${stood:-?}; ops short after the newcomers asked: ${1:-?} (after their ft_init began: ${2:-?}); 8 equal models; the newcomers' srun ended $((e - k)) ms after it began" \
		"${why#; }"
}

part_row() {
	d="part: srun --no-kill, shrink, in-band (PMIx): the switch split 1,2 | 3,4 mid-job"
	t0=$(date +%s) st=0
	# shellcheck disable=SC2016
	run_in FTCC_POLICY=shrink FTCC_DETECT_TIMEOUT_MS=1000 PART_OUT="$C" \
		srun --no-kill -N4 -n8 -w h1,h2,h3,h4 --mpi=pmix sh -c \
		'"$0" "$@" >"$PART_OUT.r$SLURM_PROCID" 2>&1; echo "exit $?" >>"$PART_OUT.r$SLURM_PROCID"' \
		"$B/test/part_rank" 8 1000 >"$OUT" 2>&1 &
	job=$!
	t=0
	while [ "$(cat "$C".r? 2>/dev/null | grep -c "^running pid")" -lt 8 ] && [ "$t" -lt 100 ]; do
		sleep 0.1
		t=$((t + 1))
	done
	sleep 1
	"$NETNS" "$C" partition 1,2 3,4
	cut=$(date +%s%N)
	t=0
	while [ "$(cat "$C".r4 "$C".r5 "$C".r6 "$C".r7 2>/dev/null | grep -c "^exit")" -lt 4 ] &&
		[ "$t" -lt $((DEADLINE * 10)) ]; do
		sleep 0.1
		t=$((t + 1))
	done
	"$NETNS" "$C" heal
	wait "$job" || st=$?
	why=""
	for r in 0 1 2 3; do
		f=$C.r$r
		grep -q "^ok part rank $r size 4 " "$f" && grep -q "^exit 0" "$f" ||
			why="$why; rank $r (majority): $(grep -v "ftcc\[" "$f" | tail -2 | tr '\n' ' ')"
		grep -q "^WRONG" "$f" && why="$why; rank $r: $(grep "^WRONG" "$f" | head -1)"
	done
	for r in 4 5 6 7; do
		f=$C.r$r
		last=$(sed -n 's/^err part rank .* last \([0-9]*\) at .*/\1/p' "$f")
		if ! grep -q "^exit 4[23]$" "$f"; then
			why="$why; rank $r (cut off): $(grep "^exit" "$f"), not 43 (EPARTITIONED) or 42 (EXCLUDED)"
		elif grep -q "^ok part\|^view\|^WRONG" "$f"; then
			why="$why; rank $r (cut off) printed results"
		elif [ -z "$last" ] || [ "$last" -ge "$cut" ]; then
			why="$why; rank $r (cut off): an op ended after the split"
		fi
	done
	for r in 0 1 2 3 4 5 6 7; do sed "s/^/[$r] /" "$C.r$r"; done >>"$OUT"
	# a step cancelled by Slurm says why only in a slurmstepd's log
	grep -h "error" "$C"/slurm/slurmd-h*.log 2>/dev/null | sed 's/^/[slurmd] /' >>"$OUT" || true
	rm -f "$C".r?
	ok=1
	[ -n "$why" ] || ok=0
	verdict $ok ": hosts 1, 2 went on with 4 ranks, hosts 3, 4's ranks stopped" "${why#; }"
}

echo "== Slurm $(run_in srun --version | cut -d' ' -f2): 5 namespace hosts (4 x 2 ranks, host 5 spare), srun from host 1"
{ want rejoin || want rejoin-nolog || want rejoin-inband; } && rejoin_ref
i=0
while [ "$i" -lt "$TRIALS" ]; do
	if want matrix-pmix; then
		matrix "matrix-pmix: srun --mpi=pmix, tcp: collectives matrix" 8 srun -N4 -n8 -w h1,h2,h3,h4 \
			--mpi=pmix "$B/test/tsan_rank" collectives 1
		if fabric "tcp;ofi_rxm"; then
			matrix "matrix-pmix: srun --mpi=pmix, fabric tcp;ofi_rxm: collectives matrix" 8 \
				FTCC_TRANSPORT=fabric "FI_PROVIDER=tcp;ofi_rxm" srun -N4 -n8 -w h1,h2,h3,h4 \
				--mpi=pmix "$B/test/tsan_rank" collectives 1
		else
			echo "SKIPPED: libfabric provider 'tcp;ofi_rxm' is not available"
		fi
	fi
	if want matrix-file; then
		mkdir -p "$SHARED/rdv"
		matrix "matrix-file: srun --mpi=none, file rendezvous: allreduce_check" 1 \
			FTCC_RENDEZVOUS="$SHARED/rdv" srun -N4 -n8 -w h1,h2,h3,h4 --mpi=none \
			"$B/examples/allreduce_check" 100003 5
	fi
	want kill && kill_row
	want rejoin && rejoin_row "$i" shared
	want rejoin-nolog && rejoin_row "$i" local
	want rejoin-inband && rejoin_row "$i" inband
	want rejoin-shard && shard_row "$i"
	want grow && grow_row "$i"
	i=$((i + 1))
done
want part && part_row

echo "Slurm tests: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
