#!/bin/sh
# SPDX-License-Identifier: MIT
# rejoin_corrupt.sh MODE PROGRAM ARGS...: damages this rank's pairwise log before a restarted incarnation starts.
#
# Run as the rank program under `ftcc-run --restart` (FTCC_INCARNATION > 0
# on a restart). MODE: trunc (every journal cut in half, mid-record),
# flip (one payload byte flipped in each slot), gone (the log removed),
# alien (the logs of another job, from $REJOIN_ALIEN_DIR, put in their place).
set -eu
mode=$1
shift
if [ "${FTCC_INCARNATION:-0}" -gt 0 ]; then
	dir=${FTCC_LOG_DIR:-/dev/shm/ftcc-log-$(id -u)}/${FTCC_JOB_ID:?}
	r=${FTCC_RANK:?}
	for s in 0 1; do
		j=$dir/r$r-s$s.log p=$dir/r$r-s$s.in
		case $mode in
		trunc) [ -f "$j" ] && truncate -s $(($(stat -c %s "$j") / 2 + 3)) "$j" ;;
		flip) if [ -s "$p" ]; then
			off=$(($(stat -c %s "$p") / 2))
			b=$(dd if="$p" bs=1 skip="$off" count=1 2>/dev/null | od -An -tu1 | tr -d ' ')
			printf "$(printf '\\%03o' $(((b + 1) % 256)))" |
				dd of="$p" bs=1 seek="$off" count=1 conv=notrunc 2>/dev/null
		fi ;;
		gone) rm -f "$j" "$p" ;;
		alien) cp "${REJOIN_ALIEN_DIR:?}/r$r-s$s.log" "$j" 2>/dev/null || true
			cp "${REJOIN_ALIEN_DIR:?}/r$r-s$s.in" "$p" 2>/dev/null || true ;;
		esac
	done
	echo "rejoin_corrupt: rank $r incarnation $FTCC_INCARNATION: log damaged ($mode)" >&2
fi
exec "$@"
