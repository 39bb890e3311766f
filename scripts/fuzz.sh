#!/bin/sh
# fuzz.sh BUILD_DIR: fuzzes the log reader (test/fuzz/fuzz_log.c) with afl++ for FUZZ_SECONDS; fails on any crash.
set -eu
B=${1:?usage: scripts/fuzz.sh BUILD_DIR}
SECONDS_=${FUZZ_SECONDS:-60}
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
"$top/scripts/deps.sh" afl++
cc=""
for c in afl-clang-fast afl-gcc-fast afl-cc; do
	if command -v "$c" >/dev/null 2>&1; then
		cc=$c
		break
	fi
done
if [ -z "$cc" ]; then
	echo "fuzz: no afl++ compiler (afl-clang-fast, afl-gcc-fast, afl-cc) found" >&2
	exit 2
fi
mkdir -p "$B/fuzz"
bin="$B/fuzz/fuzz_log_afl"
out="$B/fuzz/afl-out"
echo "fuzz: building $bin with $cc"
AFL_QUIET=1 "$cc" -std=c11 -D_GNU_SOURCE -O2 -g -Iinclude -Ilib -o "$bin" \
	test/fuzz/fuzz_log.c lib/log_read.c lib/crc32c.c lib/reduce.c
rm -rf "$out"
echo "fuzz: afl-fuzz for ${SECONDS_}s on test/fuzz/corpus"
AFL_SKIP_CPUFREQ=1 AFL_I_DONT_CARE_ABOUT_MISSING_CRASHES=1 AFL_NO_UI=1 AFL_NO_AFFINITY=1 \
	AFL_SKIP_CRASHES=1 timeout -k 10 $((SECONDS_ + 120)) \
	afl-fuzz -V "$SECONDS_" -i test/fuzz/corpus -o "$out" -- "$bin" >"$B/fuzz/afl.log" 2>&1 || {
	echo "fuzz: afl-fuzz failed; the end of $B/fuzz/afl.log:" >&2
	tail -n 30 "$B/fuzz/afl.log" >&2
	exit 2
}
stats="$out/default/fuzzer_stats"
if [ ! -f "$stats" ]; then
	echo "fuzz: no $stats" >&2
	exit 2
fi
stat() { awk -F: -v k="$1" '{gsub(/ /, "", $1); gsub(/ /, "", $2)} $1 == k {print $2}' "$stats"; }
execs=$(stat execs_done)
crashes=$(stat saved_crashes)
[ -n "$crashes" ] || crashes=$(stat unique_crashes)
hangs=$(stat saved_hangs)
[ -n "$hangs" ] || hangs=$(stat unique_hangs)
echo "fuzz: ${SECONDS_}s, execs_done $execs, crashes $crashes, hangs $hangs, corpus $(stat corpus_count) (${out})"
if [ "${crashes:-0}" -ne 0 ]; then
	echo "fuzz: crashing inputs in $out/default/crashes" >&2
	exit 1
fi
