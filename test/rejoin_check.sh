#!/bin/sh
# rejoin_check.sh BUILD_DIR N STEPS COUNT TRIALS [KILLS]: bit-identical rejoin, killed from outside.
#
# Runs examples/train_rejoin once with nothing failing (every op's result
# digest, every rank's final model digest), then TRIALS times under
# `ftcc-run --restart` with KILLS ranks (default 1) killed by SIGKILL at
# random moments. Every op digest any incarnation of any rank prints, and
# every final model digest, must equal the failure-free ones, with
# contributors == N. A run past its deadline is a failure (a hang).
# env: FTCC_TRANSPORT etc. pass through; REJOIN_DEADLINE (s, default 120).
set -u
B=$1 N=$2 STEPS=$3 COUNT=$4 TRIALS=$5 KILLS=${6:-1}
DEADLINE=${REJOIN_DEADLINE:-120}
PAUSE=${REJOIN_PAUSE_MS:-4}
export FTCC_POLICY=rejoin
export FTCC_LOG_LEVEL=${FTCC_LOG_LEVEL:-2}
export FTCC_REJOIN_TIMEOUT_MS=${FTCC_REJOIN_TIMEOUT_MS:-20000}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

run() { # out args...
	out=$1
	shift
	timeout "$DEADLINE" "$B/ftcc-run" -n "$N" "$@" "$B/examples/train_rejoin" "$STEPS" "$COUNT" "$PAUSE" >"$out" 2>&1
}

# digests: "op digest" lines and "model" lines, without the rank prefix
ops() { sed -n 's/^\[\([0-9]*\)[^]]*\] op \([0-9]*\) digest \([0-9a-f]*\) contributors \([0-9]*\)$/\2 \3 \4/p' "$1"; }
models() { sed -n 's/^\[\([0-9]*\)[^]]*\] model \([0-9a-f]*\)$/\1 \2/p' "$1"; }

t0=$(date +%s%N)
if ! run "$tmp/ref"; then
	echo "FAIL: the failure-free run failed:"; tail -20 "$tmp/ref"; exit 1
fi
ops "$tmp/ref" | sort -u >"$tmp/ref.ops"
ref_model=$(models "$tmp/ref" | awk '{print $2}' | sort -u)
nref=$(cut -d' ' -f1 "$tmp/ref.ops" | sort -u | wc -l)
if [ "$nref" -ne "$STEPS" ] || [ "$(echo "$ref_model" | wc -l)" -ne 1 ] ||
   [ "$(cut -d' ' -f1 "$tmp/ref.ops" | uniq -d | wc -l)" -ne 0 ]; then
	echo "FAIL: the failure-free run does not agree with itself"; exit 1
fi
# kills land between 0.3 s and 80% of a failure-free run's time
dur=$(( ($(date +%s%N) - t0) / 1000000 ))
fails=0 t=1
while [ "$t" -le "$TRIALS" ]; do
	args="--restart"
	k=0
	while [ "$k" -lt "$KILLS" ]; do
		r=$(awk -v n="$N" -v s="$t$k$$" 'BEGIN{srand(s); print int(rand()*n)}')
		at=$(awk -v s="$t$k$$" -v d="$dur" 'BEGIN{srand(s+7); lo=0.3; hi=d*0.8/1000; if (hi<lo+0.2) hi=lo+0.2; printf "%.2f", lo + rand()*(hi-lo)}')
		args="$args --kill $r@$at"
		k=$((k + 1))
	done
	# shellcheck disable=SC2086
	run "$tmp/t$t" $args
	rc=$?
	bad=""
	[ "$rc" -eq 124 ] && bad="hang (deadline ${DEADLINE}s)"
	[ -z "$bad" ] && [ "$rc" -ne 0 ] && bad="exit status $rc"
	if [ -z "$bad" ]; then
		ops "$tmp/t$t" | sort -u >"$tmp/t$t.ops"
		wrong=$(join -v1 "$tmp/t$t.ops" "$tmp/ref.ops" 2>/dev/null; awk 'NR==FNR{r[$1]=$2" "$3; next} !($1 in r) || r[$1] != $2" "$3' "$tmp/ref.ops" "$tmp/t$t.ops")
		[ -n "$wrong" ] && bad="op digests differ: $(echo "$wrong" | head -3 | tr '\n' ';')"
		nm=$(models "$tmp/t$t" | awk '{print $1}' | sort -u | wc -l)
		mw=$(models "$tmp/t$t" | awk -v m="$ref_model" '$2 != m' | head -1)
		[ -z "$bad" ] && [ "$nm" -ne "$N" ] && bad="$nm of $N ranks printed a model"
		[ -z "$bad" ] && [ -n "$mw" ] && bad="model differs: $mw"
		rejoined=$(grep -c "rejoined: the job stands" "$tmp/t$t")
		[ -z "$bad" ] && [ "$rejoined" -lt 1 ] && grep -q "restarted rank" "$tmp/t$t" &&
			bad="a rank was restarted but never rejoined"
	fi
	if [ -n "$bad" ]; then
		echo "FAIL trial $t ($args): $bad"
		grep -v " digest " "$tmp/t$t" | tail -30
		fails=$((fails + 1))
	else
		echo "ok trial $t ($args): $(grep -c 'rejoined: the job stands' "$tmp/t$t") rejoined, $(grep -c 'replaying op' "$tmp/t$t") replayed from the log"
	fi
	t=$((t + 1))
done
echo "rejoin_check n=$N steps=$STEPS count=$COUNT: $((TRIALS - fails))/$TRIALS trials bit-identical"
[ "$fails" -eq 0 ]
