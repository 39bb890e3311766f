#!/bin/sh
# SPDX-License-Identifier: MIT
# rejoin_check.sh BUILD_DIR N STEPS COUNT: exact rejoin, checked against a failure-free run.
#
# Runs examples/train_rejoin once with nothing failing and records every
# op's result digest and every rank's final model digest. Then runs trials
# under `ftcc-run --restart`:
#   TRIALS=k      k trials, each killing KILLS random ranks (default 1) with
#                 SIGKILL from outside at random moments of the run;
#   FAULTS='a|b'  one trial per FTCC_FAULT spec (a spec may hold several
#                 points separated by ';', see docs/environment.md);
#   MODE=exact    (default) every op any incarnation prints has the
#                 failure-free digest and contributors == N, every rank ends
#                 with the failure-free model, and a restarted rank rejoined;
#   MODE=fallback an op may instead report fewer contributors (the shrink
#                 fallback): never a digest that differs at N contributors;
#   WRAP=cmd      run each rank as `cmd train_rejoin ...` (tests corrupting logs);
#   RUN_ARGS=...  ftcc-run options instead of --restart;
#   REJOIN_KEEP=dir  a failing run's output (and the failure-free one) is copied there;
#   COLL=rs       the job reduce-scatters (train_rejoin's "rs"): each rank's
#                 digests are its own block's, compared rank by rank;
#   COLL=ag       the job allgathers (train_rejoin's "ag");
#   COLL=oop      the job's allreduce is out of place (train_rejoin's "oop");
#   COLL=zero     each step reduce-scatters, updates the rank's shard and
#                 allgathers it (train_rejoin's "zero"): only the allgathers
#                 print a digest;
#   PROG=train_steps  that example instead (steps of one to three collectives
#                 of different kinds, resumed mid-step): STEPS is its steps,
#                 and the ops are those its failure-free run printed.
# A run past REJOIN_DEADLINE seconds (default 120) is a hang: a failure.
set -u
B=$1 N=$2 STEPS=$3 COUNT=$4
TRIALS=${TRIALS:-0} KILLS=${KILLS:-1} FAULTS=${FAULTS:-} MODE=${MODE:-exact}
WRAP=${WRAP:-} RUN_ARGS=${RUN_ARGS:---restart} COLL=${COLL:-} PROG=${PROG:-train_rejoin}
DEADLINE=${REJOIN_DEADLINE:-120}
# an armed FTCC_FAULT keeps every rank on the ring, where its points are:
# the failure-free run takes the ring too (the one-host path adds in
# another order)
[ -z "$FAULTS" ] || export FTCC_SHM=0
PAUSE=${REJOIN_PAUSE_MS:-2}
export FTCC_POLICY=rejoin
export FTCC_LOG_LEVEL=${FTCC_LOG_LEVEL:-2}
export FTCC_REJOIN_TIMEOUT_MS=${FTCC_REJOIN_TIMEOUT_MS:-20000}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
label="${PROG#train_rejoin}${FTCC_MEMBERSHIP:+ $FTCC_MEMBERSHIP} n=$N steps=$STEPS count=$COUNT${COLL:+ $COLL}${FTCC_TRANSPORT:+ $FTCC_TRANSPORT}${FI_PROVIDER:+/$FI_PROVIDER}${FTCC_LOG_ENGINE:+ $FTCC_LOG_ENGINE}"

run() { # out ftcc-run-args...
	out=$1
	shift
	# shellcheck disable=SC2086
	timeout "$DEADLINE" "$B/ftcc-run" -n "$N" --tag "$@" $WRAP "$B/examples/$PROG" \
		"$STEPS" "$COUNT" "$PAUSE" $COLL >"$out" 2>&1
}

# "op digest contributors" and "rank model" lines, without the rank prefix
# (COLL=rs: "rank:op digest contributors", every rank's result its own)
ops() {
	if [ "$COLL" = rs ]; then
		sed -n 's/^\[\([0-9]*\)[^]]*\] op \([0-9]*\) digest \([0-9a-f]*\) contributors \([0-9]*\)$/\1:\2 \3 \4/p' "$1"
	else
		sed -n 's/^\[\([0-9]*\)[^]]*\] op \([0-9]*\) digest \([0-9a-f]*\) contributors \([0-9]*\)$/\2 \3 \4/p' "$1"
	fi
}
KEYS=$STEPS
[ "$COLL" = rs ] && KEYS=$((STEPS * N))
models() { sed -n 's/^\[\([0-9]*\)[^]]*\] model \([0-9a-f]*\)$/\1 \2/p' "$1"; }

t0=$(date +%s%N)
if ! FTCC_FAULT= WRAP= run "$tmp/ref"; then
	echo "FAIL ($label): the failure-free run failed:"; tail -20 "$tmp/ref"; exit 1
fi
dur=$((($(date +%s%N) - t0) / 1000000))
# ft_init's time: when the first op's line came out (--tag: "[R.I +SECONDS]")
init=$(sed -n 's/^\[[0-9]*\.[0-9]* +\([0-9.]*\)s\] op 1 digest.*/\1/p' "$tmp/ref" | sort -g | tail -1 |
	awk '{printf "%d", $1 * 1000}')
[ -n "$init" ] || init=300
# the last op: train_steps and train_rejoin's zero run more ops than steps
{ [ "$PROG" != train_rejoin ] || [ "$COLL" = zero ]; } &&
	KEYS=$(ops "$tmp/ref" | cut -d' ' -f1 | sort -u | wc -l) &&
	LASTOP=$(ops "$tmp/ref" | cut -d' ' -f1 | sort -n | tail -1)
# when a run's first rank returned the last op (ms), or nothing
last_op_ms() { # out
	sed -n "s/^\[[0-9]*\.[0-9]* +\([0-9.]*\)s\] op ${LASTOP:-$STEPS} digest.*/\1/p" "$1" |
		sort -g | head -1 | awk '{printf "%d", $1 * 1000}'
}
last=$(last_op_ms "$tmp/ref")
[ -n "$last" ] || last=$dur
ops "$tmp/ref" | sort -u >"$tmp/ref.ops"
ref_model=$(models "$tmp/ref" | awk '{print $2}' | sort -u)
if [ "$(cut -d' ' -f1 "$tmp/ref.ops" | sort -u | wc -l)" -ne "$KEYS" ] ||
   [ "$(echo "$ref_model" | wc -l)" -ne 1 ] ||
   [ "$(cut -d' ' -f1 "$tmp/ref.ops" | uniq -d | wc -l)" -ne 0 ] ||
   [ "$(awk -v n="$N" '$3 != n' "$tmp/ref.ops" | wc -l)" -ne 0 ]; then
	echo "FAIL ($label): the failure-free run does not agree with itself"; exit 1
fi

fails=0 total=0
# The kill times are drawn from the failure-free run's timing; on a loaded
# machine a trial may run faster than it. A kill that landed after the
# victim's first incarnation printed its model (the job was over for it)
# tests nothing, nor one that landed on a later incarnation once the job's
# last op had returned everywhere (the others finalized, and its next
# incarnation found the job ended: a victim killed twice, the second time
# between its last op and its model), nor one that landed before the job
# began (the first view settled without the victim, whose first ops the
# others then ran without it: libfabric's slow start on a loaded machine):
# such a trial is void and drawn again, at most twice; a third void draw
# fails (the row could not land a kill).
void_trial() { # out killed-ranks...
	out=$1
	shift
	for v in "$@"; do
		grep -q "rank $v is gone for certain (the job's first view was settled without it)" \
			"$out" && { why="before the job's first view"; return 0; }
		grep -q "^\[$v\.0 [^]]*\] model " "$out" && { why="after the job's end"; return 0; }
		grep -q "^\[$v\.[0-9]* [^]]*\] ft_init: the job has ended: every other rank finalized" \
			"$out" && { why="after the others' end"; return 0; }
	done
	return 1
}

check() { # name out rc need_rejoin
	name=$1 out=$2 rc=$3 need_rejoin=$4 bad=""
	total=$((total + 1))
	[ "$rc" -eq 124 ] && bad="hang (deadline ${DEADLINE}s)"
	[ -e "$out.void" ] && bad="three draws in a row landed outside the job"
	if [ -z "$bad" ] && [ "$MODE" = exact ] && [ "$rc" -ne 0 ]; then
		bad="exit status $rc"
	fi
	if [ -z "$bad" ] && grep -E -q "killed by signal ([0-8]|1[0-9])|core dumped|Sanitizer" "$out"; then
		bad="a rank crashed: $(grep -E "killed by signal|core dumped|Sanitizer" "$out" | head -2)"
	fi
	if [ -z "$bad" ]; then
		ops "$out" | sort -u >"$out.ops"
		# an op at N contributors must carry the failure-free digest; in exact
		# mode every op must be at N contributors
		wrong=$(awk -v n="$N" -v mode="$MODE" 'NR==FNR {r[$1]=$2; next}
			($3 == n && r[$1] != $2) || (mode == "exact" && $3 != n) || $3 > n' \
			"$tmp/ref.ops" "$out.ops" | sort -n | head -3 | tr '\n' ';')
		[ -n "$wrong" ] && bad="wrong op results: $wrong"
		lossy=$(awk -v n="$N" '$3 < n' "$out.ops" | wc -l)
		survivors=$(models "$out" | awk '{print $1}' | sort -u | wc -l)
		if [ -z "$bad" ] && [ "$survivors" -lt $((N - KILLS)) ]; then
			bad="only $survivors ranks finished"
		fi
		if [ -z "$bad" ] && [ "$lossy" -eq 0 ]; then
			nm=$(models "$out" | awk '{print $1}' | sort -u | wc -l)
			mw=$(models "$out" | awk -v m="$ref_model" '$2 != m' | head -1)
			[ "$nm" -ne "$N" ] && bad="$nm of $N ranks ended with a model"
			[ -z "$bad" ] && [ -n "$mw" ] && bad="model differs from the failure-free one: $mw"
		fi
		if [ -z "$bad" ] && [ "$MODE" = exact ] && [ "$need_rejoin" = 1 ] &&
		   grep -q "restarted rank" "$out" && ! grep -q "rejoined: the job stands" "$out"; then
			bad="a rank was restarted but never rejoined"
		fi
	fi
	if [ -n "$bad" ]; then
		echo "FAIL ($label) $name: $bad"
		# REJOIN_KEEP=dir: the failing run's output is kept there
		[ -n "${REJOIN_KEEP:-}" ] && mkdir -p "$REJOIN_KEEP" && cp "$out" "$tmp/ref" "$REJOIN_KEEP/"
		grep -v " digest " "$out" | tail -40
		fails=$((fails + 1))
	else
		echo "ok ($label) $name: $(grep -c 'rejoined: the job stands' "$out") rejoined," \
			"$(grep -c 'replaying op' "$out") replayed from a log, $lossy ops by the shrink fallback"
	fi
}

t=1 redrawn=0
while [ "$t" -le "$TRIALS" ]; do
	args="$RUN_ARGS" victims=""
	k=0
	while [ "$k" -lt "$KILLS" ]; do
		# (mawk's srand takes the same seed for every value past 2^31: one
		# draw, three times over, once voided a row)
		seed=$(($(od -An -N4 -tu4 /dev/urandom | tr -d ' ') % 2147483647))
		r=$(awk -v n="$N" -v s="$seed" 'BEGIN{srand(s); print int(rand()*n)}')
		# inside the job: between 10% and 50% of the way from the first op to
		# the last, and nearer the start after a draw that landed past the end
		# (this run is faster than the failure-free one was)
		at=$(awk -v s="$seed" -v e="$last" -v i="$init" -v d="$redrawn" 'BEGIN{srand(s+7);
			f=0.5^d; lo=(i+(e-i)*0.1*f)/1000; hi=(i+(e-i)*0.5*f)/1000;
			printf "%.2f", lo + rand()*(hi-lo)}')
		args="$args --kill $r@$at"
		victims="$victims $r"
		k=$((k + 1))
	done
	# (a rank restarted after the job's end waits for it in ft_init: a short wait here)
	# shellcheck disable=SC2086
	FTCC_CONNECT_TIMEOUT_MS=${FTCC_CONNECT_TIMEOUT_MS:-10000} run "$tmp/t$t" $args
	rc=$?
	# shellcheck disable=SC2086
	if void_trial "$tmp/t$t" $victims; then
		redrawn=$((redrawn + 1))
		# this machine runs the job faster now than the failure-free
		# run did (make test's other lane was busy then): draw within
		# the void run's own span from now on
		end=$(last_op_ms "$tmp/t$t")
		[ -n "$end" ] && [ "$end" -lt "$last" ] && [ "$end" -gt "$init" ] && last=$end
		echo "void ($label) trial $t ($args): the kill landed $why (draw $redrawn)"
		[ "$redrawn" -lt 3 ] && continue
		rc=1
		echo "x a kill inside the job" >>"$tmp/t$t.void"
	fi
	redrawn=0
	check "trial $t ($args)" "$tmp/t$t" "$rc" 0
	t=$((t + 1))
done
if [ -n "$FAULTS" ]; then
	echo "$FAULTS" | tr '|' '\n' >"$tmp/faults"
	i=0
	while IFS= read -r spec; do
		i=$((i + 1))
		# shellcheck disable=SC2086
		FTCC_FAULT="$spec" run "$tmp/f$i" $RUN_ARGS
		rc=$?
		# a rank killed before the job's first view starts it afresh: no rejoin
		case $spec in *phase=init*) need=0 ;; *) need=1 ;; esac
		check "FTCC_FAULT='$spec'" "$tmp/f$i" "$rc" "$need"
	done <"$tmp/faults"
fi
echo "rejoin_check ($label, $MODE): $((total - fails))/$total runs passed"
[ "$fails" -eq 0 ]
