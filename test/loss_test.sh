#!/bin/sh
# SPDX-License-Identifier: MIT
# loss_test.sh BUILD_DIR: a lossy link declares no healthy rank (shrink and
# rejoin, file and in-band membership). Each job runs in a network namespace
# of its own whose loopback drops a share of the TCP packets (nftables), and
# nothing is killed: every rank must finish every op with every rank's
# input. TCP retransmits a lost segment after 0.2, 0.6, 1.4, 3 s; a
# detector that took those waits for a neighbour's silence declared healthy
# ranks (the detect timeout is 1 s).
# Needs root, unshare and nft: else it says SKIPPED and exits 77.
set -u
B=$1
PCT=${LOSS_PCT:-5}
STEPS=${LOSS_STEPS:-150}
skip() {
	echo "SKIPPED: $*"
	exit 77
}
[ "$(id -u)" -eq 0 ] || skip "not root (a network namespace and nftables need it)"
command -v nft >/dev/null || skip "no nft (make deps installs nftables)"
unshare -n true 2>/dev/null || skip "cannot make a network namespace"
unshare -n sh -c 'nft add table inet t' 2>/dev/null || skip "nftables does not work here"
job() { # policy membership: its verdict on stdout, its status
	out=$(mktemp)
	# 150 steps: about 8 s at 5% loss (an op that meets a loss waits for
	# its retransmission); before the detector knew a lossy path, 3 of 5
	# such jobs declared a healthy rank
	unshare -n sh -c "
		ip link set lo up &&
		nft add table inet loss &&
		nft add chain inet loss in '{ type filter hook input priority 0; }' &&
		nft add rule inet loss in meta l4proto tcp numgen random mod 100 '<' $PCT drop &&
		exec env FTCC_POLICY=$1 FTCC_MEMBERSHIP=$2 FTCC_CONNECT_TIMEOUT_MS=20000 \
			FTCC_REJOIN_TIMEOUT_MS=20000 \
			$B/ftcc-run -n 5 --timeout 60 $B/examples/train_steps $STEPS 2000 5" \
		>"$out" 2>&1
	rc=$?
	ops=$(grep -c ' digest .* contributors 5$' "$out")
	fewer=$(grep -c ' digest .* contributors [0-4]$' "$out")
	declared=$(grep -c 'declaring rank' "$out")
	ok=0
	if [ "$rc" -eq 0 ] && [ "$fewer" -eq 0 ] && [ "$declared" -eq 0 ] && [ "$ops" -gt 0 ]; then
		echo "ok: $1/$2 under $PCT% loss: $ops results at 5 ranks, nobody declared"
		ok=1
	else
		echo "FAILED: $1/$2 under $PCT% loss: status $rc, $ops results at 5 ranks, $fewer by fewer, $declared declarations:"
		grep -E 'declaring|error|cannot' "$out" | head -20
	fi
	rm -f "$out"
	[ "$ok" -eq 1 ]
}
# each job in a namespace of its own: both at once
v1=$(mktemp)
v2=$(mktemp)
job shrink file >"$v1" 2>&1 &
p1=$!
job rejoin inband >"$v2" 2>&1
s2=$?
wait "$p1"
s1=$?
cat "$v1" "$v2"
rm -f "$v1" "$v2"
[ "$s1" -eq 0 ] && [ "$s2" -eq 0 ]
