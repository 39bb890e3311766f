#!/bin/sh
# cluster_test.sh BUILD_DIR: ftcc across 4 namespace hosts x 2 ranks under Open MPI's mpirun: correct results over tcp and libfabric, a whole host killed under shrink.
#
# Each row is a real mpirun job (test/cluster/netns.sh mpirun) with no
# FTCC_BIND_HOST: every rank must find its address by itself. Rows:
#   tcp, fabric (tcp;ofi_rxm):  allreduce_check and tsan_rank's collectives
#       matrix (dtypes, ops, counts, in place, broadcast from every root,
#       barriers), every rank checking its results;
#   tcp and fabric, shrink: a whole host (both its ranks, its Open MPI
#       daemon) SIGKILLed mid-job; the six survivors finish exactly
#       (tsan_rank shrink: every result checked against the inputs of the
#       members left).
# CLUSTER_ROWS picks rows (default "tcp fabric kill"), CLUSTER_KILL_TRIALS
# repeats the kill row (1), CLUSTER_DEADLINE is each job's deadline in s (40).
# Membership: CLUSTER_MEMBERSHIP=file (default) gives the ranks a shared
# rendezvous directory (namespaces share the file system); inband sets
# FTCC_MEMBERSHIP=inband and no directory. Every job runs under a deadline:
# a hang is a failure. Exit 0 all passed, 1 a row failed, 77 skipped (not
# root, no namespaces, no mpirun): SKIPPED says why.
set -eu
B=$(cd "$1" && pwd)
HERE=$(cd "$(dirname "$0")" && pwd)
NETNS=$HERE/netns.sh
DEADLINE=${CLUSTER_DEADLINE:-40}
MEMBERSHIP=${CLUSTER_MEMBERSHIP:-file}
ROWS=${CLUSTER_ROWS:-tcp fabric kill}
TRIALS=${CLUSTER_KILL_TRIALS:-1}

command -v mpirun >/dev/null 2>&1 || { echo "SKIPPED: cluster tests: no mpirun (Open MPI)"; exit 77; }
for p in examples/allreduce_check test/tsan_rank; do
	[ -x "$B/$p" ] || { echo "cluster_test.sh: $B/$p is not built (make $B/$p)" >&2; exit 1; }
done
C=$(mktemp -d "${TMPDIR:-/tmp}/ftcc-cluster.XXXXXX")
RDV=$C.rdv
OUT=$C.out
cleanup() {
	"$NETNS" "$C" destroy || true
	rm -rf "$RDV" "$OUT" "$C"
}
trap cleanup EXIT
trap 'exit 1' INT TERM
rc=0
"$NETNS" "$C" create 4 >/dev/null || rc=$?
if [ "$rc" -ne 0 ]; then
	rmdir "$C" 2>/dev/null || true
	exit "$rc"
fi
unset FTCC_BIND_HOST
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
	if [ "$st" -eq 0 ] && [ "$got" -eq "$want" ]; then
		pass=$((pass + 1))
		echo "ok   $d ($(($(date +%s) - t0)) s)"
	else
		fail=$((fail + 1))
		echo "FAIL $d: exit $st$([ "$st" -eq 124 ] && echo " (deadline)"), $got of $want ok lines ($(($(date +%s) - t0)) s)"
		sed 's/^/     /' "$OUT" | tail -40
	fi
	rm -rf "${RDV:?}"/*
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
	row "fabric tcp;ofi_rxm: allreduce_check" 1 -x FTCC_TRANSPORT=fabric -x "FI_PROVIDER=tcp;ofi_rxm" \
		"$B/examples/allreduce_check" 100003 5
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
	t=0 left=""
	while [ "$t" -lt $((DEADLINE * 10)) ] && kill -0 "$job" 2>/dev/null; do
		[ "$(ranks_alive)" -eq 0 ] && left=${left:-$t}
		[ -n "$left" ] && [ $((t - left)) -ge 30 ] && break
		sleep 0.1
		t=$((t + 1))
	done
	note=""
	if kill -0 "$job" 2>/dev/null && [ -n "$left" ]; then
		note=", mpirun stopped: it did not exit 3 s after the survivors"
		for h in 1 2 3; do "$NETNS" "$C" kill "$h"; done
	fi
	wait "$job" || st=$?
	got=$(grep -c "^ok shrink rank [0-5] size 6 " "$OUT" || true)
	# mpirun reports the lost host's ranks and exits nonzero: judge the survivors
	if [ "$got" -eq 6 ] && [ -n "$left" ] && [ "$started" -eq 8 ]; then
		pass=$((pass + 1))
		echo "ok   $d: 6 survivors exact (mpirun exit $st$note, $(($(date +%s) - t0)) s)"
	else
		fail=$((fail + 1))
		echo "FAIL $d: exit $st$([ "$st" -eq 124 ] && echo " (deadline)"), $got of 6 survivors ok, killed after $((waited / 10)) s with $started of 8 ranks running ($(($(date +%s) - t0)) s)"
		sed 's/^/     /' "$OUT" | tail -40
	fi
	rm -rf "${RDV:?}"/*
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

echo "cluster tests: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
