#!/bin/sh
# SPDX-License-Identifier: MIT
# fuzz.sh BUILD_DIR [NAME...]: builds every fuzz harness (test/fuzz/fuzz_NAME.c) with afl++ and fuzzes each in turn for FUZZ_SECONDS, or FUZZ_EXECS executions; fails on any crash.
set -eu
B=${1:?usage: scripts/fuzz.sh BUILD_DIR [NAME...]}
shift
SECONDS_=${FUZZ_SECONDS:-60}
EXECS=${FUZZ_EXECS:-}
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
names=${*:-"log frame ctl inband store memberfile ckpt"}
bins=""
for n in $names; do
	bins="$bins $B/fuzz/fuzz_${n}_afl"
done
echo "fuzz: building$bins with $cc"
make -s B="$B" FUZZ_AFL_CC="$cc" $bins
# -E stops at an execution count; -V at a time (the count wins when both are set)
if [ -n "$EXECS" ]; then
	limit="-E $EXECS"
	budget=$((EXECS / 500 + 600)) # the outer timeout: 500 execs/s at the slowest
else
	limit="-V $SECONDS_"
	budget=$((SECONDS_ + 120))
fi
stat() { awk -F: -v k="$1" '{gsub(/ /, "", $1); gsub(/ /, "", $2)} $1 == k {print $2}' "$2"; }
fail=0
for n in $names; do
	out="$B/fuzz/afl-$n"
	rm -rf "$out"
	echo "fuzz: $n: afl-fuzz $limit on test/fuzz/corpus/$n"
	# nice: the machine is shared; afl's own CPU binding is off for the same reason
	AFL_SKIP_CPUFREQ=1 AFL_I_DONT_CARE_ABOUT_MISSING_CRASHES=1 AFL_NO_UI=1 AFL_NO_AFFINITY=1 \
		AFL_SKIP_CRASHES=1 timeout -k 10 "$budget" nice -n 19 \
		afl-fuzz $limit -i "test/fuzz/corpus/$n" -o "$out" -- "$B/fuzz/fuzz_${n}_afl" \
		>"$out.log" 2>&1 || {
		if [ ! -f "$out/default/fuzzer_stats" ]; then
			echo "fuzz: $n: afl-fuzz failed; the end of $out.log:" >&2
			tail -n 30 "$out.log" >&2
			exit 2
		fi
	}
	stats="$out/default/fuzzer_stats"
	if [ ! -f "$stats" ]; then
		echo "fuzz: $n: no $stats" >&2
		exit 2
	fi
	crashes=$(stat saved_crashes "$stats")
	hangs=$(stat saved_hangs "$stats")
	echo "fuzz: $n: execs_done $(stat execs_done "$stats") ($(stat execs_per_sec "$stats")/s)," \
		"crashes $crashes, hangs $hangs, corpus $(stat corpus_count "$stats") ($out)"
	if [ "${crashes:-0}" -ne 0 ]; then
		echo "fuzz: $n: crashing inputs in $out/default/crashes" >&2
		fail=1
	fi
done
exit $fail
