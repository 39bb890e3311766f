#!/bin/sh
# run-tests.sh BUILD_DIR TEST...: run every Criterion test binary under a deadline; a hang is a failure.
set -u
B=$1
shift
export FTCC_BUILD_DIR="$B"
# Under make asan: Criterion itself leaks a few bytes at exit; ignore only that.
export LSAN_OPTIONS="suppressions=$(dirname "$0")/lsan.supp:print_suppressions=0"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
pass=0
fail=0
failed=""
for t in "$@"; do
	echo "== $t"
	if timeout -k 10 900 "$t" --jobs "${FTCC_TEST_JOBS:-2}" --short-filename; then
		pass=$((pass + 1))
	else
		fail=$((fail + 1))
		failed="$failed $t"
	fi
done
echo
[ -n "$failed" ] && echo "failed:$failed"
echo "tests: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
