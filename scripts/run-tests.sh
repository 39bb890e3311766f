#!/bin/sh
# run-tests.sh BUILD_DIR TEST...: run every Criterion test binary under a deadline; a hang is a failure.
set -u
B=$1
shift
export FTCC_BUILD_DIR="$B"
# Under make asan: Criterion itself leaks a few bytes at exit; ignore only that.
export LSAN_OPTIONS="suppressions=$(dirname "$0")/lsan.supp:print_suppressions=0"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# libfabric shm: SAR copies, as ftcc-run gives its ranks (README, "shm copies").
export FI_SHM_DISABLE_CMA="${FI_SHM_DISABLE_CMA:-1}"
pass=0
fail=0
failed=""
echo "== scripts/check-lib.sh $B"
if "$(dirname "$0")/check-lib.sh" "$B"; then
	pass=$((pass + 1))
else
	fail=$((fail + 1))
	failed="$failed check-lib"
fi
# Exact rejoin: real processes killed from outside and at injection points,
# every result against a failure-free run; the fallbacks (test/rejoin_tests.sh).
if [ -x "$B/examples/train_rejoin" ] && [ -z "${FTCC_SKIP_REJOIN:-}" ]; then
	echo "== test/rejoin_tests.sh $B"
	if timeout -k 10 900 "$(dirname "$0")"/../test/rejoin_tests.sh "$B"; then
		pass=$((pass + 1))
	else
		fail=$((fail + 1))
		failed="$failed rejoin_tests"
	fi
fi
# The log reader's fuzz seeds (and their prefixes) under ASan and UBSan.
if [ -x "$B/fuzz/fuzz_log_replay" ]; then
	echo "== $B/fuzz/fuzz_log_replay test/fuzz/corpus/*"
	if timeout -k 10 300 "$B/fuzz/fuzz_log_replay" "$(dirname "$0")"/../test/fuzz/corpus/*; then
		pass=$((pass + 1))
	else
		fail=$((fail + 1))
		failed="$failed fuzz_log_replay"
	fi
fi
for t in "$@"; do
	echo "== $t"
	if timeout -k 10 900 "$t" --jobs "${FTCC_TEST_JOBS:-2}" --short-filename; then
		pass=$((pass + 1))
	else
		fail=$((fail + 1))
		failed="$failed $t"
	fi
done
# The allreduce matrix, the other collectives and the shrink (kill) tests
# again over libfabric, one provider at a time (a parameter, not copied
# tests). FTCC_KILL_PROVIDERS lists the providers the kill tests run over.
for t in "$@"; do
	case "$t" in
	*/test_allreduce | */test_collectives) provs="shm tcp;ofi_rxm tcp" ;;
	*/test_shrink) provs=${FTCC_KILL_PROVIDERS:-"shm tcp;ofi_rxm tcp"} ;;
	*/test_policy_shrink) provs="shm" ;;
	*) continue ;;
	esac
	for prov in $provs; do
		if ! command -v fi_info >/dev/null 2>&1 || ! fi_info -p "$prov" >/dev/null 2>&1; then
			echo "== SKIPPED: libfabric provider '$prov' is not available"
			continue
		fi
		echo "== $t over fabric/$prov"
		if FTCC_TEST_TRANSPORT=fabric FI_PROVIDER="$prov" timeout -k 10 900 "$t" \
			--jobs "${FTCC_TEST_JOBS:-2}" --short-filename; then
			pass=$((pass + 1))
		else
			fail=$((fail + 1))
			failed="$failed $t(fabric/$prov)"
		fi
	done
done
# The kill tests again with in-band membership (no rendezvous directory in
# the control plane; a peer list of loopback ports the test holds).
for t in "$@"; do
	case "$t" in
	*/test_shrink) ;;
	*) continue ;;
	esac
	echo "== $t over in-band membership"
	if FTCC_TEST_MEMBERSHIP=inband timeout -k 10 900 "$t" --jobs "${FTCC_TEST_JOBS:-2}" \
		--short-filename; then
		pass=$((pass + 1))
	else
		fail=$((fail + 1))
		failed="$failed $t(inband)"
	fi
done
echo
[ -n "$failed" ] && echo "failed:$failed"
echo "tests: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
