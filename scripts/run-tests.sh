#!/bin/sh
# SPDX-License-Identifier: MIT
# run-tests.sh BUILD_DIR TEST...: run every Criterion test binary under a deadline; a hang is a failure.
set -u
# --only-units: make check's subset, the given binaries and the fuzz corpora only
units=""
[ "${1:-}" = --only-units ] && units=1 && shift
B=$1
shift
export FTCC_BUILD_DIR="$B"
# Under make asan: Criterion itself leaks a few bytes at exit; ignore only that.
export LSAN_OPTIONS="suppressions=$(dirname "$0")/lsan.supp:print_suppressions=0"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# libfabric shm: SAR copies, as ftcc-run gives its ranks (docs/launchers.md, "Transports").
export FI_SHM_DISABLE_CMA="${FI_SHM_DISABLE_CMA:-1}"
JOBS=${FTCC_TEST_JOBS:-2}
# Each row's output is kept; what a failed row said is repeated at the end,
# where a CI log that shows only its tail still shows why.
LOGS="$B/test-logs"
rm -rf "$LOGS"
mkdir -p "$LOGS"
n_item=0
start_all=$(date +%s)
# Rows run FTCC_TEST_LANES at a time (default 2): most of a row's time is
# waiting (detection, timeouts, a rank's start), not CPU. A row that needs
# the machine to itself (namespace hosts, the campaign's clock steps and
# cgroups, a rebuild) runs alone (item --alone). Each row's output goes to
# its log and is printed whole when the row ends.
LANES=${FTCC_TEST_LANES:-2}
running=""
# reap N: waits until fewer than N rows run.
reap() {
	while :; do
		still=""
		n=0
		for p in $running; do
			if kill -0 "$p" 2>/dev/null; then
				still="$still $p"
				n=$((n + 1))
			else
				wait "$p" 2>/dev/null
			fi
		done
		running=$still
		[ "$n" -lt "$1" ] && return 0
		sleep 0.2
	done
}
# run_item NAME DEADLINE_S LOG COMMAND...: the row under its deadline (a hang
# is a failure), its status and time, then its whole output at once.
run_item() {
	name=$1
	deadline=$2
	log=$3
	shift 3
	t0=$(date +%s)
	timeout -k 10 "$deadline" "$@" </dev/null >"$log" 2>&1
	rc=$?
	echo "$rc" >"$log.rc"
	if [ "$rc" = 0 ]; then verdict=ok; else verdict="FAILED (status $rc)"; fi
	echo "== $name: $verdict in $(($(date +%s) - t0)) s" >"$log.verdict"
	flock "$LOGS/.out" sh -c 'echo "== $0"; cat "$1" "$1.verdict"' "$name" "$log"
}
# item [--alone] NAME DEADLINE_S COMMAND...: one row of the suite.
item() {
	alone=""
	[ "$1" = --alone ] && alone=1 && shift
	n_item=$((n_item + 1))
	log="$LOGS/$n_item.log"
	echo "$1" >"$log.name"
	if [ -n "$alone" ] || [ "$LANES" -le 1 ]; then
		reap 1
		name=$1
		deadline=$2
		shift 2
		run_item "$name" "$deadline" "$log" "$@"
		return 0
	fi
	reap "$LANES"
	name=$1
	deadline=$2
	shift 2
	run_item "$name" "$deadline" "$log" "$@" &
	running="$running $!"
}
# Every fuzz harness's corpus (seeds, kept finds, regressions) under ASan and UBSan.
fuzz_replays() {
	for n in log frame ctl inband store memberfile ckpt; do
		if [ -x "$B/fuzz/fuzz_${n}_replay" ]; then
			item "fuzz_${n}_replay" 300 "$B/fuzz/fuzz_${n}_replay" \
				"$(dirname "$0")"/../test/fuzz/corpus/"$n"/*
		fi
	done
}
# What failed and why (a CI log that shows only its tail still shows it: the
# failures, errors, and a detector's declarations on its own evidence); the status.
summary() {
	reap 1
	pass=0
	fail=0
	failed=""
	echo
	i=1
	while [ "$i" -le "$n_item" ]; do
		log="$LOGS/$i.log"
		i=$((i + 1))
		if [ "$(cat "$log.rc" 2>/dev/null)" = 0 ]; then
			pass=$((pass + 1))
			continue
		fi
		fail=$((fail + 1))
		failed="$failed $(cat "$log.name")"
		echo "== why $(cat "$log.name") failed (all of it: $log):"
		grep -E '\[FAIL\]|\[----\] .*:[0-9]+: |Timed out|[Cc]rash|FAILED|error|not ok|declaring rank' "$log" |
			grep -v '^== ' | tail -n 20
	done
	[ -n "$failed" ] && echo "failed:$failed"
	echo "tests: $pass passed, $fail failed in $(($(date +%s) - start_all)) s ($LANES at a time)"
	[ "$fail" -eq 0 ]
}
if [ -n "$units" ]; then
	item check-house 60 /usr/bin/python3 "$(dirname "$0")/check-house.py"
	fuzz_replays
	for t in "$@"; do
		item "$t" 900 "$t" --jobs "$JOBS" --short-filename
	done
	summary
	exit
fi
# The rows that need the machine to themselves come first, one after the
# other, before any row runs beside another: each waits for both lanes to
# empty, and one in the middle of the suite once left a lane idle for a
# minute behind a long row.
item --alone check-build 300 "$(dirname "$0")/check-build.sh"
# A slice of the reliability campaign (make campaign runs 1000 trials):
# one random trial per cell (shrink and rejoin, each over file and in-band
# membership, each over TCP, shm, tcp;ofi_rxm and the one-host path, and
# shrink on TCP with the ring and with recursive halving forced), kills
# from outside, every verdict checked.
if [ -x "$B/examples/train_steps" ] && [ -x /usr/bin/python3 ]; then
	item --alone campaign_slice 900 /usr/bin/python3 \
		"$(dirname "$0")"/campaign.py "$B" "${FTCC_CAMPAIGN_SLICE:-20}"
fi
# The namespace cluster (test/cluster/cluster_test.sh; make cluster-test
# runs every row): one row of each kind, so that a regression of any fails
# here: mpirun's matrix over tcp (tcp) and over libfabric (fabric), the
# in-band membership under PMIx (ib-tcp) and under a peer list (ib-peers),
# a host killed (ib-kill), a whole host lost with its ranks' running
# checkpoints, read back from the next host's memory (ckpt-peer), and ranks
# without mpirun whose host's link drops (linkdown) or whose hosts split in
# halves (part-half). Measured alone, one at a time: 1, 4, 1, 0.5, 4, 7, 6
# and 8 s.
if [ -x "$B/examples/train_sharded" ] && [ -x "$B/test/tsan_rank" ]; then
	item --alone cluster 240 env \
		CLUSTER_ROWS="tcp fabric ib-tcp ib-peers ib-kill ckpt-peer linkdown part-half" \
		sh -c '"$0" "$1"; rc=$?; [ "$rc" -eq 77 ] && exit 0; exit "$rc"' \
		"$(dirname "$0")"/../test/cluster/cluster_test.sh "$B"
fi
# Slurm: srun jobs on a real Slurm cluster of network-namespace hosts
# (test/cluster/slurm_test.sh: the collectives matrix, a host killed under
# shrink, exact rejoin on a spare host, a partition); it says SKIPPED and
# why when it cannot run here (not root, no namespaces, no Slurm).
if [ -x "$B/test/part_rank" ] && [ -x "$B/test/tsan_rank" ]; then
	item --alone slurm 600 sh -c '"$0" "$1"; rc=$?; [ "$rc" -eq 77 ] && exit 0; exit "$rc"' \
		"$(dirname "$0")"/../test/cluster/slurm_test.sh "$B"
fi
item check-lib 300 "$(dirname "$0")/check-lib.sh" "$B"
item check-house 60 /usr/bin/python3 "$(dirname "$0")/check-house.py"
item check-install 300 "$(dirname "$0")/check-install.sh" "$B"
# What a user finds after make install: man pages for every function of
# ftcc.h (man -w), the examples built through pkg-config, one in C++ run.
item check-man 300 "$(dirname "$0")/check-man.sh" "$B"
# The references against the code (docs/environment.md, docs/errors.md),
# --version on every tool, FT_CONFIG_INIT in C and C++: a second or so.
item check-docs 60 "$(dirname "$0")/check-docs.sh" "$B"
# The user's pages: README.md a front page (<= 200 lines), no path outside
# the repository, commit hash or internal history, no dead relative link.
item check-pages 60 /usr/bin/python3 "$(dirname "$0")/check-pages.py"
# Exact rejoin: real processes killed from outside and at injection points,
# every result against a failure-free run; the fallbacks (test/rejoin_tests.sh).
if [ -x "$B/examples/train_rejoin" ] && [ -z "${FTCC_SKIP_REJOIN:-}" ]; then
	item rejoin_tests 900 "$(dirname "$0")"/../test/rejoin_tests.sh "$B"
fi
# Growing back: a job that went on without killed ranks takes their new
# incarnations in at its next op (test/grow_test.sh).
if [ -x "$B/examples/train_rejoin" ] && [ -x "$B/examples/train_steps" ]; then
	item grow 300 "$(dirname "$0")"/../test/grow_test.sh "$B"
fi
# A lossy link declares no healthy rank: 5% of TCP packets dropped in a
# network namespace of the row's own, nothing killed (test/loss_test.sh).
if [ -x "$B/examples/train_steps" ]; then
	item loss 180 sh -c '"$0" "$1"; rc=$?; [ "$rc" -eq 77 ] && exit 0; exit "$rc"' \
		"$(dirname "$0")"/../test/loss_test.sh "$B"
fi
# The PyTorch backend (bindings/torch): pytest, multi-process jobs under deadlines.
if ls "$B"/python/ftcc/_C*.so >/dev/null 2>&1; then
	item torch_backend 600 /usr/bin/python3 -m pytest -q -p no:cacheprovider \
		"$(dirname "$0")"/../test/torch/test_torch.py
else
	echo "== SKIPPED: torch_backend: $B/python/ftcc not built (Debian's PyTorch missing: make deps-torch)"
fi
# (the longest rows first: a long one last leaves the other lane idle)
# The allreduce matrix, the other collectives and the shrink (kill) tests
# again over libfabric, one provider at a time (a parameter, not copied
# tests). FTCC_KILL_PROVIDERS lists the providers the kill tests run over.
# The reruns of test_shrink draw one random outside kill per ranks-and-size
# cell instead of two (FTCC_SHRINK_TRIALS; the TCP run keeps two, and
# `make campaign` runs ten): a libfabric rank's start alone costs about
# 0.3 s of CPU here (libfabric 1.17 reads /proc/kallsyms twice in fi_getinfo).
RERUN_TRIALS=${FTCC_SHRINK_TRIALS:-1}
for t in "$@"; do
	case "$t" in
	# (the plain tcp provider only under the allreduce matrix: its kill
	# and collectives reruns, 54 s, took make test past 9 minutes here;
	# FTCC_KILL_PROVIDERS="shm tcp;ofi_rxm tcp" runs them)
	*/test_allreduce) provs="shm tcp;ofi_rxm tcp" ;;
	*/test_collectives) provs="shm tcp;ofi_rxm" ;;
	*/test_shrink) provs=${FTCC_KILL_PROVIDERS:-"shm tcp;ofi_rxm"} ;;
	*/test_policy_shrink) provs="shm" ;;
	*) continue ;;
	esac
	for prov in $provs; do
		if ! command -v fi_info >/dev/null 2>&1 || ! fi_info -p "$prov" >/dev/null 2>&1; then
			echo "== SKIPPED: libfabric provider '$prov' is not available"
			continue
		fi
		# (FTCC_SHM=0: under abort, ranks of one host would take the
		# one-host path, and not a byte would cross libfabric)
		item "$t(fabric/$prov)" 900 env FTCC_TEST_TRANSPORT=fabric FI_PROVIDER="$prov" \
			FTCC_SHRINK_TRIALS="$RERUN_TRIALS" FTCC_SHM=0 \
			"$t" --jobs "$JOBS" --short-filename
	done
done
# The allreduce matrix on the TCP ring: its own run (test_allreduce, under
# abort) takes the one-host path
for t in "$@"; do
	case "$t" in
	*/test_allreduce) item "$t(tcp ring)" 900 env FTCC_SHM=0 "$t" --jobs "$JOBS" \
		--short-filename ;;
	esac
done
# The kill tests again with in-band membership (no rendezvous directory in
# the control plane; a peer list of loopback ports the test holds), on the
# TCP ring (FTCC_SHM=0: test_shrink's own run takes the one-host path).
for t in "$@"; do
	case "$t" in
	*/test_shrink) item "$t(inband, tcp ring)" 900 env FTCC_TEST_MEMBERSHIP=inband \
		FTCC_SHRINK_TRIALS="$RERUN_TRIALS" FTCC_SHM=0 \
		"$t" --jobs "$JOBS" --short-filename ;;
	esac
done
fuzz_replays
for t in "$@"; do
	item "$t" 900 "$t" --jobs "$JOBS" --short-filename
done
summary
