#!/bin/sh
# SPDX-License-Identifier: MIT
# rejoin_tests.sh BUILD_DIR [campaign]: exact rejoin under real kills, over TCP and libfabric; the fallbacks.
#
# Every run is checked against a failure-free run of the same job
# (test/rejoin_check.sh). With "campaign", every random-kill row runs
# CAMPAIGN_TRIALS trials (default 20) instead of its few.
set -u
B=$1
C=$(dirname "$0")/rejoin_check.sh
X=$(dirname "$0")/rejoin_corrupt.sh
few() { if [ "${2:-}" = campaign ]; then echo "${CAMPAIGN_TRIALS:-20}"; else echo "$1"; fi; }
mode=${2:-}
# Sections 1 to 5 run the ring (FTCC_SHM=0: ranks of one host would take
# the one-host path, and not a byte would cross the transport named);
# section 6 runs the one-host path.
export FTCC_SHM=${FTCC_SHM:-0}
pass=0 fail=0
step() { # description command...
	d=$1
	shift
	echo "-- $d"
	s0=$(date +%s)
	if "$@"; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAILED: $d"; fi
	echo "-- ($(($(date +%s) - s0)) s)"
}
fabric() { command -v fi_info >/dev/null 2>&1 && fi_info -p "$1" >/dev/null 2>&1; }

# 1. outside SIGKILL at random moments, n = 2..6, small and large buffers, TCP
#    (small ops pause 10 ms per step, so that a job lasts long enough for a
#    kill to land inside it)
step "tcp n=2 small" env REJOIN_PAUSE_MS=10 TRIALS="$(few 3 "$mode")" "$C" "$B" 2 30 1000
step "tcp n=3 large" env TRIALS="$(few 3 "$mode")" REJOIN_PAUSE_MS=0 "$C" "$B" 3 10 1000000
step "tcp n=4 large" env TRIALS="$(few 3 "$mode")" REJOIN_PAUSE_MS=0 "$C" "$B" 4 8 4000000
step "tcp n=5" env REJOIN_PAUSE_MS=10 TRIALS="$(few 2 "$mode")" "$C" "$B" 5 20 100000
# n=6 small: the row that showed a rank killed inside ft_init left out of
# the job's first view (fixed: such a rank is awaited)
step "tcp n=6 small" env REJOIN_PAUSE_MS=10 TRIALS="$(few 1 "$mode")" "$C" "$B" 6 20 1000
step "tcp n=6 large" env TRIALS="$(few 2 "$mode")" REJOIN_PAUSE_MS=0 "$C" "$B" 6 8 1000000
step "tcp n=4 two kills" env REJOIN_PAUSE_MS=10 TRIALS="$(few 2 "$mode")" KILLS=2 "$C" "$B" 4 20 100000
step "tcp n=4 pwrite engine" env TRIALS="$(few 2 "$mode")" FTCC_LOG_ENGINE=pwrite REJOIN_PAUSE_MS=0 \
	"$C" "$B" 4 8 1000000
# out of place: the input is logged from the caller's buffer as it is reduced
step "tcp n=4 large out of place" env COLL=oop TRIALS="$(few 2 "$mode")" REJOIN_PAUSE_MS=0 \
	FAULTS="rank=2,op=3,phase=allgather,step=1,seg=3|rank=1,op=4,phase=reduce_scatter,step=2,seg=1,at=recorded" \
	"$C" "$B" 4 8 1000000
step "tcp n=3 durability host" env TRIALS=1 FTCC_LOG_DURABILITY=host "$C" "$B" 3 20 100000
# 2. libfabric
for prov in shm "tcp;ofi_rxm"; do
	if fabric "$prov"; then
		step "fabric/$prov n=4" env TRIALS="$(few 2 "$mode")" FTCC_TRANSPORT=fabric FI_PROVIDER="$prov" \
			"$C" "$B" 4 60 200000
	else
		echo "-- SKIPPED: libfabric provider '$prov' is not available"
	fi
done
# 3. the library's own injection points: every phase (and inside ft_init's
#    own barrier, op 0); a kill just after a
#    frame is sent and before its record, just after a received frame's
#    record and before its use; the restarted rank dying again during its
#    replay; a neighbour and the state's sender dying during it; two at once
F="rank=1,op=3,phase=between|rank=2,op=0,phase=allgather,step=1"
F="$F|rank=2,op=3,phase=reduce_scatter,step=0,seg=0|rank=2,op=3,phase=reduce_scatter,step=2,seg=15"
F="$F|rank=0,op=3,phase=allgather,step=0,seg=0|rank=3,op=3,phase=allgather,step=2,seg=7"
F="$F|rank=1,op=3,phase=commit,step=1"
F="$F|rank=1,op=3,phase=reduce_scatter,step=1,seg=3,at=sent|rank=2,op=3,phase=allgather,step=1,seg=9,at=sent"
F="$F|rank=2,op=3,phase=reduce_scatter,step=0,seg=1,at=recorded|rank=1,op=3,phase=allgather,step=2,seg=5,at=recorded"
F="$F|rank=1,op=3,phase=allgather,step=1,seg=2;rank=1,op=3,phase=reduce_scatter,step=1,seg=0,inc=1"
F="$F|rank=1,op=3,phase=allgather,step=1,seg=2;rank=2,op=3,phase=reduce_scatter,step=1,seg=0,gen=1"
F="$F|rank=1,op=3,phase=allgather,step=1,seg=2;rank=0,op=3,phase=allgather,step=2,seg=0,gen=1"
F="$F|rank=1,op=3,phase=allgather,step=0,seg=4;rank=3,op=3,phase=allgather,step=0,seg=4"
step "injection points" env FAULTS="$F" REJOIN_PAUSE_MS=0 "$C" "$B" 4 6 4000000
# killed inside ft_init: after publishing its record, before the job's first
# view (the others await its new incarnation), once it settled but before
# the ring's links, and in ft_init's barrier
step "killed inside ft_init" \
	env FAULTS="rank=1,phase=init|rank=0,phase=init|rank=2,phase=connect|rank=2,op=0,phase=between" \
	REJOIN_PAUSE_MS=2 "$C" "$B" 4 10 100000
# reduce-scatter and allgather (train_rejoin rs, ag): the newcomer's
# application runs the interrupted op again (they are not replayed from the
# log); every rank's block bit-identical to the failure-free run's
R="rank=2,op=3,phase=reduce_scatter,step=1,seg=0|rank=1,op=5,phase=commit,step=1|rank=3,op=4,phase=between"
R="$R|rank=0,op=6,phase=reduce_scatter,step=0,seg=0,at=sent|rank=2,op=7,phase=reduce_scatter,step=2,seg=0,at=recorded"
step "tcp n=4 reduce-scatter" env COLL=rs TRIALS="$(few 2 "$mode")" FAULTS="$R" REJOIN_PAUSE_MS=10 \
	"$C" "$B" 4 20 50000
A="rank=2,op=3,phase=allgather,step=1,seg=0|rank=1,op=5,phase=commit,step=0"
A="$A|rank=0,op=4,phase=allgather,step=0,seg=0,at=recorded"
step "tcp n=4 allgather" env COLL=ag TRIALS=1 FAULTS="$A" REJOIN_PAUSE_MS=10 "$C" "$B" 4 20 50000
# a sharded optimizer's step (train_rejoin zero: reduce-scatter, update the
# rank's block, allgather it): killed inside the allgather, whose input its
# new incarnation cannot compute again, it replays it from its log (wrong
# models without the replay); killed in the reduce-scatter, its application
# runs it again
Z="rank=2,op=4,phase=allgather,step=1,seg=0|rank=1,op=6,phase=commit,step=0"
Z="$Z|rank=0,op=8,phase=allgather,step=0,seg=0,at=recorded|rank=3,op=10,phase=allgather,step=2,seg=0"
Z="$Z|rank=1,op=5,phase=reduce_scatter,step=1,seg=0"
step "tcp n=4 sharded step: allgather replayed" env COLL=zero FAULTS="$Z" REJOIN_PAUSE_MS=10 \
	"$C" "$B" 4 12 50000
step "tcp n=3 sharded step, large: allgather replayed" env COLL=zero REJOIN_PAUSE_MS=0 \
	FAULTS="rank=1,op=4,phase=allgather,step=0,seg=2|rank=2,op=6,phase=allgather,step=1,seg=5,at=sent" \
	"$C" "$B" 3 6 2000000
# steps of one to three collectives of different kinds (examples/train_steps:
# SGD with momentum, a broadcast every 7th step, a MAX every 11th), 5 ranks,
# random outside kills: a newcomer resumes where the job stands, mid-step
# too, from the position it registered with its state (the review's program
# once resumed at the step's start, and the job ended)
step "train_steps n=5 random kills" env PROG=train_steps TRIALS="$(few 6 "$mode")" \
	REJOIN_PAUSE_MS=5 "$C" "$B" 5 60 2000
step "train_steps n=5 killed at mid-step collectives" env PROG=train_steps \
	FAULTS="rank=1,op=11,phase=between|rank=2,op=11,phase=broadcast,step=0,seg=0|rank=3,op=16,phase=between" \
	REJOIN_PAUSE_MS=5 "$C" "$B" 5 60 2000
# 4. in-band membership (no rendezvous directory): ftcc-run's store gives
#    the restarted rank its book, and it finds its job by asking the job's
#    ranks (docs/rejoin.md, "Over in-band membership"): exact as above
IB="rank=1,op=3,phase=between|rank=2,op=3,phase=reduce_scatter,step=0,seg=0"
IB="$IB|rank=0,op=3,phase=allgather,step=0,seg=0|rank=2,op=3,phase=commit,step=1"
IB="$IB|rank=1,op=3,phase=allgather,step=1,seg=2;rank=1,op=3,phase=reduce_scatter,step=1,seg=0,inc=1"
IB="$IB|rank=1,op=3,phase=allgather,step=1,seg=2;rank=0,op=3,phase=allgather,step=2,seg=0,gen=1"
IB="$IB|rank=1,op=3,phase=allgather,step=0,seg=4;rank=3,op=3,phase=allgather,step=0,seg=4"
step "inband injection points" env FTCC_MEMBERSHIP=inband FAULTS="$IB" REJOIN_PAUSE_MS=0 \
	"$C" "$B" 4 6 4000000
# two newcomers next to each other, taken in two generations, with no log
# (the state from a survivor, along one chain): rank 3 killed in op 5, then
# rank 4 in op 5 again once generation 1 took rank 3 back (and the other
# order); the later newcomer finds the same route as the others. Killed
# inside the transfer: the chain's root (rank 2, sending rank 3 the state),
# and the middle of a chain 2 -> 3 -> 4 (rank 3's new incarnation, passing
# it on; its next one is taken while rank 4 still awaits the state)
IB2="rank=3,op=5,phase=allgather,step=1,seg=0;rank=4,op=5,phase=reduce_scatter,step=0,seg=0,gen=1"
IB2="$IB2|rank=4,op=5,phase=allgather,step=1,seg=0;rank=3,op=5,phase=reduce_scatter,step=0,seg=0,gen=1"
IB2="$IB2|rank=3,op=5,phase=allgather,step=1,seg=0;rank=2,op=5,phase=broadcast,step=0,seg=1,gen=1"
IB2="$IB2|rank=3,op=5,phase=allgather,step=1,seg=0;rank=4,op=5,phase=allgather,step=1,seg=0;rank=3,op=5,phase=broadcast,step=0,seg=1,inc=1"
# ... and a newcomer taken two generations after another that still awaits
# the state (rank 3 back in generation 1, rank 1 killed in its op and back
# in 2, rank 4 killed and back in 3): in-band, rank 4 holds no view before
# 2, and once found another route than the others (FT_EPROTO on every
# member: restarted, then no member held the state, and the job hung)
IB2="$IB2|rank=3,op=5,phase=allgather,step=1,seg=0;rank=1,op=5,phase=reduce_scatter,step=0,seg=0,gen=1;rank=4,op=5,phase=reduce_scatter,step=0,seg=0,gen=2"
step "inband two newcomers in two generations, kills in the transfer, no log" env FTCC_MEMBERSHIP=inband \
	FTCC_LOG_DURABILITY=none FAULTS="$IB2" REJOIN_PAUSE_MS=0 "$C" "$B" 6 10 4000000
# every member a new incarnation awaiting the state, no log (rank 1 killed
# in op 5 and taken back; rank 0 killed while it sends it the state, and
# taken back): nobody holds it. Both ranks fail at once with FT_ESTATELOST
# (they once waited for a view no failure brings, past their timeouts,
# newcomers asking for the next generation with them)
state_lost() { # membership
	out=$(mktemp)
	s0=$(date +%s)
	FTCC_MEMBERSHIP=$1 FTCC_POLICY=rejoin FTCC_LOG_DURABILITY=none FTCC_LOG_LEVEL=2 \
		FTCC_REJOIN_TIMEOUT_MS=20000 FTCC_CONNECT_TIMEOUT_MS=10000 \
		FTCC_FAULT="rank=1,op=5,phase=allgather,step=0,seg=0;rank=0,op=5,phase=broadcast,step=0,seg=1,gen=1" \
		timeout 60 "$B/ftcc-run" -n 2 --restart --max-restarts 1 "$B/examples/train_rejoin" 10 \
		4000000 0 >"$out" 2>&1
	rc=$? dt=$(($(date +%s) - s0)) ok=0
	lost=$(grep -c "state: the registered state is lost" "$out")
	if [ "$rc" -eq 124 ]; then
		echo "FAIL: a hang (60 s)"
	elif [ "$lost" -ne 2 ] || [ "$dt" -gt 15 ]; then
		echo "FAIL: $lost of 2 ranks said the state is lost, after $dt s (status $rc)"
	else
		echo "ok: both ranks: the state is lost, after $dt s"
		ok=1
	fi
	[ "$ok" -eq 1 ] || grep -v " digest " "$out" | tail -30
	rm -f "$out"
	[ "$ok" -eq 1 ]
}
# A rank whose ft_init fails after the job's first view (here: a token
# the others refuse) leaves that view to them: as the view's dense rank 0
# it once removed it, and its next incarnation, finding no job to rejoin,
# took the start for its own and ran the whole job alone (a different model
# from the others': campaign trial 722, a rank out of descriptors in ft_init)
views_kept() {
	vd=$(mktemp -d)
	for r in 1 2; do
		FTCC_RENDEZVOUS=$vd FTCC_JOB_ID=j FTCC_WORLD_SIZE=3 FTCC_RANK=$r FTCC_TOKEN=good \
			FTCC_POLICY=rejoin timeout 60 "$B/examples/train_steps" 300 1000 10 \
			>"$vd/out$r" 2>&1 &
	done
	FTCC_RENDEZVOUS=$vd FTCC_JOB_ID=j FTCC_WORLD_SIZE=3 FTCC_RANK=0 FTCC_TOKEN=bad \
		FTCC_POLICY=rejoin timeout 60 "$B/examples/train_steps" 300 1000 10 >"$vd/out0" 2>&1
	rc0=$?
	ok=0
	if [ "$rc0" -eq 0 ]; then
		echo "FAIL: rank 0, whose token the others refuse, finished (status 0)"
	elif [ ! -f "$vd/j/gen-0/view" ]; then
		echo "FAIL: rank 0's failed ft_init removed the job's first view under its live ranks"
	else
		echo "ok: rank 0's ft_init failed (status $rc0), the job's first view is there"
		ok=1
	fi
	wait
	rm -rf "$vd"
	[ "$ok" -eq 1 ]
}
step "a rank whose ft_init fails leaves the job's views" views_kept
# In-band, the first incarnations of ranks 0 and 4 die before the store's
# book goes out (their new incarnations take their places back in it) and
# rank 1's after it, before the job's first view: the new incarnations of
# 0 and 4 once waited for a rank 1 that their book still named, first
# incarnations 2 and 3 for coordinator 0, and every ft_init timed out
# (campaign seed 20261130, trials 319 and 619). Ranks 2 and 3 start late,
# so the book goes out after the restarts.
late_book() {
	out=$(mktemp)
	wrap=$(mktemp)
	printf '#!/bin/sh\ncase "$FTCC_RANK:${FTCC_INCARNATION:-0}" in 2:0|3:0) sleep 1;; esac\nexec "$@"\n' \
		>"$wrap"
	chmod +x "$wrap"
	FTCC_FAULT='rank=1,phase=init' FTCC_MEMBERSHIP=inband FTCC_POLICY=rejoin \
		FTCC_CONNECT_TIMEOUT_MS=10000 FTCC_REJOIN_TIMEOUT_MS=10000 timeout 60 \
		"$B/ftcc-run" -n 5 --tag --timeout 40 --restart --max-restarts 3 --kill 0@0.1 \
		--kill 4@0.2 "$wrap" "$B/examples/train_steps" 20 2000 5 - >"$out" 2>&1
	rc=$? ok=0
	models=$(grep -c ' model ' "$out")
	distinct=$(grep ' model ' "$out" | awk '{print $NF}' | sort -u | wc -l)
	if [ "$rc" -ne 0 ] || [ "$models" -ne 5 ] || [ "$distinct" -ne 1 ]; then
		echo "FAIL: status $rc, $models models ($distinct distinct), want 5 alike"
	else
		echo "ok: the job started with its new incarnations; 5 ranks end with one model"
		ok=1
	fi
	[ "$ok" -eq 1 ] || grep -v " digest " "$out" | tail -30
	rm -f "$out" "$wrap"
	[ "$ok" -eq 1 ]
}
step "inband: ranks die before and after the book, before the first view" late_book
step "nobody holds the state: FT_ESTATELOST at once (file)" state_lost file
step "nobody holds the state: FT_ESTATELOST at once (inband)" state_lost inband
step "inband tcp n=4 random kills" env FTCC_MEMBERSHIP=inband REJOIN_PAUSE_MS=10 \
	TRIALS="$(few 3 "$mode")" "$C" "$B" 4 20 100000
step "inband tcp n=5 two kills" env FTCC_MEMBERSHIP=inband REJOIN_PAUSE_MS=10 \
	TRIALS="$(few 2 "$mode")" KILLS=2 "$C" "$B" 5 20 100000
if fabric "tcp;ofi_rxm"; then
	step "inband fabric/tcp;ofi_rxm n=4" env FTCC_MEMBERSHIP=inband TRIALS="$(few 2 "$mode")" \
		FTCC_TRANSPORT=fabric FI_PROVIDER="tcp;ofi_rxm" "$C" "$B" 4 60 200000
else
	echo "-- SKIPPED: libfabric provider 'tcp;ofi_rxm' is not available"
fi
# 6. the one-host path (shared memory, FTCC_SHM=1): a member killed from
#    outside at a random moment of an op; the survivors run it again from
#    their backup once the new incarnation is back, on segments of the new
#    generation, and every result is the failure-free one-host run's, bit
#    for bit. An allreduce's input is not logged on this path, so the
#    newcomer's application runs the interrupted op. The in-band row with
#    two kills is the one that showed a newcomer routing the state through
#    the previous view's newcomer (newcomers.c)
step "one-host n=2 small" env FTCC_SHM=1 REJOIN_PAUSE_MS=10 TRIALS="$(few 2 "$mode")" "$C" "$B" 2 30 1000
step "one-host n=4 large" env FTCC_SHM=1 REJOIN_PAUSE_MS=0 TRIALS="$(few 2 "$mode")" "$C" "$B" 4 8 4000000
step "one-host n=5 two kills" env FTCC_SHM=1 REJOIN_PAUSE_MS=10 TRIALS="$(few 1 "$mode")" KILLS=2 \
	"$C" "$B" 5 20 100000
step "one-host inband n=5 two kills" env FTCC_SHM=1 FTCC_MEMBERSHIP=inband REJOIN_PAUSE_MS=10 \
	TRIALS="$(few 2 "$mode")" KILLS=2 "$C" "$B" 5 20 100000
step "one-host n=4 reduce-scatter" env FTCC_SHM=1 COLL=rs REJOIN_PAUSE_MS=10 \
	TRIALS="$(few 2 "$mode")" "$C" "$B" 4 40 50000
step "one-host n=4 allgather" env FTCC_SHM=1 COLL=ag REJOIN_PAUSE_MS=10 \
	TRIALS="$(few 1 "$mode")" "$C" "$B" 4 40 50000
# 5. fallbacks: never a wrong result. A newcomer the job went on without
#    exits (ft_init: -FT_EEXCLUDED); restarting it again would only find the
#    job over, so one restart.
K="rank=1,op=3,phase=allgather,step=1,seg=2"
export RUN_ARGS="--restart --max-restarts 1"
step "nobody comes back: shrink after the rejoin timeout" env MODE=fallback KILLS=1 FAULTS="$K" \
	RUN_ARGS="--ignore-killed" FTCC_REJOIN_TIMEOUT_MS=1500 REJOIN_PAUSE_MS=0 "$C" "$B" 4 6 1000000
# every documented timeout: survivors whose connect timeout is shorter than
# the rejoin timeout still wait for the detector's view (they once gave up
# with FT_ETIMEDOUT after 2 x detect + connect = 7 s, the job broken)
step "nobody comes back, connect timeout 5 s, rejoin timeout 10 s" env MODE=fallback KILLS=1 \
	FAULTS="$K" RUN_ARGS="--ignore-killed" FTCC_CONNECT_TIMEOUT_MS=5000 FTCC_REJOIN_TIMEOUT_MS=10000 \
	REJOIN_PAUSE_MS=0 "$C" "$B" 4 6 1000000
# ... and the other orders of the three (detect, connect, rejoin): each ends
# in a shrink, never a broken communicator
timeouts() { # detect connect rejoin (ms)
	step "nobody comes back, detect $1 ms, connect $2 ms, rejoin $3 ms" env MODE=fallback \
		KILLS=1 FAULTS="$K" RUN_ARGS="--ignore-killed" FTCC_DETECT_TIMEOUT_MS="$1" \
		FTCC_CONNECT_TIMEOUT_MS="$2" FTCC_REJOIN_TIMEOUT_MS="$3" REJOIN_PAUSE_MS=0 \
		"$C" "$B" 4 6 1000000
}
timeouts 300 1000 3000
timeouts 3000 2000 1000
timeouts 2000 1000 1500
# a newcomer whose program resumes at the step's start, not where the job
# stands (train_steps "naive"): it is sent away (FT_EEXCLUDED), the
# survivors never fail with FT_EMISMATCH, and go on exactly or by shrinking
step "a newcomer resuming at the wrong collective is sent away" env MODE=fallback PROG=train_steps \
	COLL=naive FAULTS="rank=1,op=11,phase=between" RUN_ARGS="--restart --max-restarts 1" \
	FTCC_REJOIN_TIMEOUT_MS=3000 REJOIN_PAUSE_MS=5 "$C" "$B" 5 60 2000
step "durability none" env MODE=fallback FAULTS="$K" FTCC_LOG_DURABILITY=none REJOIN_PAUSE_MS=0 \
	"$C" "$B" 4 6 1000000
for how in trunc flip gone; do
	step "log damaged ($how)" env MODE=fallback FAULTS="$K" WRAP="$X $how" REJOIN_PAUSE_MS=0 \
		"$C" "$B" 4 6 1000000
done
# another job's log: a job with the same id ran first and left rank 1's log
alien=$(mktemp -d)
job=rejoin-alien-$$
# (every rank hangs at op 4 and is then terminated from outside: nobody
# finalizes, so the logs stay; had the ranks killed themselves there, one
# could see the others die first, finish by shrink and remove the logs)
FTCC_JOB_ID=$job FTCC_LOG_DIR=$alien/logs FTCC_POLICY=rejoin \
	FTCC_FAULT="rank=0,op=4,action=hang;rank=1,op=4,action=hang;rank=2,op=4,action=hang;rank=3,op=4,action=hang" \
	timeout 120 "$B/ftcc-run" -n 4 "$B/examples/train_rejoin" 6 1000000 0 >"$alien/first" 2>&1 &
first=$!
i=0
while [ "$i" -lt 600 ] && [ "$(grep -c ' op 3 digest' "$alien/first")" -lt 4 ]; do
	sleep 0.1
	i=$((i + 1))
done
sleep 0.5
kill -TERM "$first" 2>/dev/null
sleep 0.5
kill -INT "$first" 2>/dev/null # a second signal: ftcc-run SIGKILLs the ranks
wait "$first"
mkdir -p "$alien/saved"
cp "$alien/logs/$job"/r1-* "$alien/saved/" 2>/dev/null
if ls "$alien/saved"/r1-s*.log >/dev/null 2>&1; then
	step "another job's log" env MODE=fallback FAULTS="$K" FTCC_JOB_ID=$job FTCC_LOG_DIR="$alien/logs" \
		REJOIN_ALIEN_DIR="$alien/saved" WRAP="$X alien" REJOIN_PAUSE_MS=0 "$C" "$B" 4 6 1000000
else
	echo "FAILED: the first job left no log of rank 1 to reuse"
	fail=$((fail + 1))
fi
rm -rf "$alien"
# a full disk: the logs on a 2 MiB tmpfs, inputs of 4 MB
full=$(mktemp -d)
if mount -t tmpfs -o size=2m ftcc-full "$full" 2>/dev/null; then
	step "full disk" env MODE=fallback FAULTS="$K" FTCC_LOG_DIR="$full" REJOIN_PAUSE_MS=0 \
		"$C" "$B" 4 6 1000000
	umount "$full"
else
	echo "-- SKIPPED: full disk (cannot mount a tmpfs here: not root?)"
fi
rmdir "$full"
echo "rejoin tests: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
