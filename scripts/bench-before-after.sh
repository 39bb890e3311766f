#!/bin/sh
# SPDX-License-Identifier: MIT
# bench-before-after.sh OLD_TREE NEW_TREE: the ring before and after a change, interleaved.
#
# Each tree is a built checkout (make all): OLD_TREE/build and NEW_TREE/build.
# For the abort, shrink and rejoin policies at 4 ranks, 64 MiB and 4 KiB, in
# place (as data-parallel trainers call it), float32 sum, TCP: ROUNDS rounds
# (default 11) of one ftbench run per tree, the tree that runs first
# alternating; prints the median of each side's per-run medians (µs) and
# before ÷ after. Issue 22's bar: each ratio within 0.97-1.03.
# Example: git worktree add /tmp/old REV && make -C /tmp/old all && make all &&
#          scripts/bench-before-after.sh /tmp/old .
set -eu
OLD=${1:?usage: scripts/bench-before-after.sh OLD_TREE NEW_TREE}
NEW=${2:?usage: scripts/bench-before-after.sh OLD_TREE NEW_TREE}
R=${ROUNDS:-11}
median() { sort -g | awk '{v[NR]=$1} END {if (NR%2) print v[(NR+1)/2]; else print (v[NR/2]+v[NR/2+1])/2}'; }
one() { # tree policy size: one ftbench run's median µs
	iters=$([ "$3" = 4K ] && echo 5000 || echo 0)
	FTCC_POLICY=$2 timeout 600 "$1/build/ftcc-run" -n 4 "$1/build/ftbench" --min "$3" --max "$3" \
		--iters "$iters" --in-place 2>&1 | awk '$1 == "[0]" && $2 !~ /^#/ && NF >= 5 {print $5; exit}'
}
echo "| policy | size | before µs | after µs | before/after |"
echo "|---|---|---|---|---|"
for cfg in "abort 64M" "shrink 64M" "rejoin 64M" "abort 4K" "shrink 4K" "rejoin 4K"; do
	# shellcheck disable=SC2086 # split on purpose: policy and size
	set -- $cfg
	b=$(mktemp) a=$(mktemp) i=0
	while [ "$i" -lt "$R" ]; do
		if [ $((i % 2)) -eq 0 ]; then
			one "$OLD" "$1" "$2" >>"$b"; one "$NEW" "$1" "$2" >>"$a"
		else
			one "$NEW" "$1" "$2" >>"$a"; one "$OLD" "$1" "$2" >>"$b"
		fi
		i=$((i + 1))
	done
	mb=$(median <"$b") ma=$(median <"$a")
	echo "| $1 | $2 | $mb | $ma | $(awk -v x="$mb" -v y="$ma" 'BEGIN {printf "%.3f", x / y}') |"
	rm -f "$a" "$b"
done
