#!/bin/sh
# SPDX-License-Identifier: MIT
# netns.sh DIR COMMAND [ARGS]: a cluster of "hosts" made of Linux network namespaces, for tests across hosts on one machine.
#
# A cluster of N hosts (2..9) is N network namespaces PREFIX-h1..hN, each with
# loopback up and one interface eth0 (a veth pair) whose other end, hI, is a
# port of the bridge br0 in a namespace of its own, PREFIX-sw: nothing of it
# lives in the root namespace, and nothing routes out of it. Host I has the
# address NET.I in the private subnet NET.0/24. PREFIX and NET come from the
# pid of the netns.sh that creates it, so that clusters made by parallel runs
# do not collide.
# DIR holds the cluster's state (DIR/cluster, sourced by every command; the
# rsh agent reads it too); `create` makes it, `destroy` removes everything.
#
# Commands (HOST: a host's number 1..N or its address):
#   create N          make the cluster (exit 77 and SKIPPED when namespaces
#                     cannot be made: not root, no ip command, no kernel support)
#   destroy           kill every process of every host, remove every namespace
#                     and DIR (safe on a half-made cluster)
#   addr HOST         the host's address;  ns HOST: its namespace name
#   hosts             every host's address, one a line
#   hostfile SLOTS    an Open MPI hostfile: each address with slots=SLOTS
#   exec HOST CMD...  run CMD in the host: its network namespace and a UTS
#                     namespace of its own whose host name is hI, so that
#                     software that tells hosts apart by name sees N hosts
#   mpirun ARGS...    Open MPI's mpirun started in host 1, over every host
#                     (a hostfile of their addresses, SLOTS ranks each,
#                     default 2), its daemons started by rsh-agent.sh
#   pids HOST         the pids of every process in the host
#   kill HOST         a whole-host crash: SIGKILL every process in the host
#                     until none is left (their sockets are closed by the
#                     kernel, as when a machine's processes all die)
#   linkdown HOST     the host's link drops every frame, both ways, in the
#                     switch: no carrier change, no FIN, no RST, no ICMP; its
#                     processes live on and hear nothing (bridge port state
#                     disabled)
#   linkup HOST       forward its frames again
#   partition G1 G2.. split the switch: each group (comma-separated hosts,
#                     e.g. 1,2 3,4 or 1,2,3 4) gets a bridge of its own;
#                     frames between groups are dropped silently. Hosts in no
#                     group stay on br0, together
#   heal              one bridge again, every link up, no delay or loss
#   netem SPEC...     tc netem SPEC (e.g. delay 50ms loss 1%) on every link,
#                     applied where frames leave the switch toward each host,
#                     so each one-way host-to-host path gets SPEC once;
#                     `netem off` removes it (exit 77 and SKIPPED when the
#                     kernel has no netem)
#   selftest          check the cluster: every pair reaches each other,
#                     linkdown is silent and heals, partitions cut exactly
#                     between groups (needs python3)
set -eu

HERE=$(cd "$(dirname "$0")" && pwd)

die() {
	echo "netns.sh: $*" >&2
	exit 1
}

skip() {
	echo "SKIPPED: netns cluster: $*"
	exit 77
}

usage() {
	sed -n '2,/^set -eu/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2
	exit 2
}

[ $# -ge 2 ] || usage
DIR=$1
CMD=$2
shift 2

load() {
	[ -f "$DIR/cluster" ] || die "$DIR is no cluster (run: netns.sh $DIR create N)"
	# shellcheck disable=SC1091
	. "$DIR/cluster"
}

# host HOST: sets I (its number) from a number or an address
host() {
	case $1 in
	"$NET".*) I=${1#"$NET".} ;;
	*) I=$1 ;;
	esac
	case $I in
	[1-9]) [ "$I" -le "$N" ] || die "no host $1 (hosts 1..$N)" ;;
	*) die "no host $1 (hosts 1..$N, or $NET.1..$NET.$N)" ;;
	esac
}

create() {
	n=$1
	case $n in [2-9]) ;; *) die "create: N must be 2..9" ;; esac
	[ "$(id -u)" -eq 0 ] || skip "needs root to make network namespaces"
	command -v ip >/dev/null 2>&1 || skip "no ip command (install iproute2: scripts/deps.sh iproute2)"
	command -v unshare >/dev/null 2>&1 || skip "no unshare command (util-linux)"
	mkdir -p "$DIR"
	[ ! -f "$DIR/cluster" ] || die "$DIR already holds a cluster"
	pid=$$
	prefix="ftcc$pid"
	net="10.$((pid / 256 % 250 + 1)).$((pid % 256))"
	cat >"$DIR/cluster" <<EOF
PREFIX=$prefix
N=$n
NET=$net
SW=$prefix-sw
EOF
	load
	if ! ip netns add "$SW" 2>"$DIR/err"; then
		rm -f "$DIR/cluster"
		skip "cannot make a network namespace: $(cat "$DIR/err")"
	fi
	ok=0
	{
		ip -n "$SW" link set lo up &&
		ip -n "$SW" link add br0 type bridge stp_state 0 forward_delay 0 &&
		ip -n "$SW" link set br0 up &&
		i=1 &&
		while [ "$i" -le "$N" ]; do
			ns="$PREFIX-h$i"
			ip netns add "$ns" &&
			ip -n "$ns" link set lo up &&
			ip -n "$ns" link add eth0 type veth peer name "h$i" netns "$SW" &&
			ip -n "$SW" link set "h$i" master br0 &&
			ip -n "$SW" link set "h$i" up &&
			ip -n "$ns" addr add "$NET.$i/24" dev eth0 &&
			ip -n "$ns" link set eth0 up || break
			i=$((i + 1))
		done &&
		[ "$i" -gt "$N" ] && ok=1
	} 2>"$DIR/err" || true
	if [ "$ok" -ne 1 ]; then
		err=$(cat "$DIR/err")
		destroy
		skip "cannot build the cluster: $err"
	fi
	rm -f "$DIR/err"
	# the bridge forwards at once (no STP, no forwarding delay); wait for
	# every port to say so, and for duplicate address detection to be off
	# the table: a host's first packets must not be lost to either
	t=0
	while [ "$t" -lt 50 ]; do
		if ! ip -n "$SW" -o link show master br0 | grep -qv "state UP"; then
			break
		fi
		sleep 0.1
		t=$((t + 1))
	done
	echo "$DIR"
}

destroy() {
	[ -f "$DIR/cluster" ] || return 0
	load
	i=1
	while [ "$i" -le "$N" ]; do
		if ip netns list | grep -q "^$PREFIX-h$i\\b"; then
			killhost "$i" || true
			ip netns del "$PREFIX-h$i" 2>/dev/null || true
		fi
		i=$((i + 1))
	done
	ip netns del "$SW" 2>/dev/null || true
	rm -f "$DIR/cluster" "$DIR/err" "$DIR/hostfile"
	rmdir "$DIR" 2>/dev/null || true
}

killhost() {
	ns="$PREFIX-h$1"
	r=0
	while [ "$r" -lt 100 ]; do
		pids=$(ip netns pids "$ns" 2>/dev/null || true)
		[ -n "$pids" ] || return 0
		# shellcheck disable=SC2086
		kill -9 $pids 2>/dev/null || true
		sleep 0.05
		r=$((r + 1))
	done
	die "kill: processes of host $1 survive SIGKILL: $(ip netns pids "$ns" | tr '\n' ' ')"
}

port_state() { # HOST STATE: bridge port state 0 (disabled) or 3 (forwarding)
	bridge -n "$SW" link set dev "h$1" state "$2"
}

heal() {
	i=1
	while [ "$i" -le "$N" ]; do
		ip -n "$SW" link set "h$i" master br0
		port_state "$i" 3
		tc -n "$SW" qdisc del dev "h$i" root 2>/dev/null || true
		i=$((i + 1))
	done
	for br in $(ip -n "$SW" -o link show type bridge | sed -n 's/^[0-9]*: \(br[0-9]*\)[:@].*/\1/p'); do
		[ "$br" = br0 ] || ip -n "$SW" link del "$br"
	done
}

partition() {
	heal
	g=1
	for group in "$@"; do
		ip -n "$SW" link add "br$g" type bridge stp_state 0 forward_delay 0
		ip -n "$SW" link set "br$g" up
		for h in $(echo "$group" | tr ',' ' '); do
			host "$h"
			ip -n "$SW" link set "h$I" master "br$g"
			port_state "$I" 3
		done
		g=$((g + 1))
	done
}

netem() {
	i=1
	while [ "$i" -le "$N" ]; do
		if [ "$1" = off ]; then
			tc -n "$SW" qdisc del dev "h$i" root 2>/dev/null || true
		elif ! tc -n "$SW" qdisc replace dev "h$i" root netem "$@" limit 100000 2>"$DIR/err"; then
			if grep -q "unknown" "$DIR/err"; then
				rm -f "$DIR/err"
				skip "the kernel has no netem qdisc (CONFIG_NET_SCH_NETEM): no delay or loss"
			fi
			cat "$DIR/err" >&2
			rm -f "$DIR/err"
			return 1
		fi
		i=$((i + 1))
	done
	rm -f "$DIR/err"
}

case $CMD in
create)
	[ $# -eq 1 ] || usage
	create "$1"
	;;
destroy) destroy ;;
addr)
	load
	host "$1"
	echo "$NET.$I"
	;;
ns)
	load
	host "$1"
	echo "$PREFIX-h$I"
	;;
hosts | hostfile)
	load
	# hostfile: the same addresses with Open MPI's slot count
	suffix=$([ "$CMD" = hostfile ] && echo " slots=${1:-1}")
	i=1
	while [ "$i" -le "$N" ]; do
		echo "$NET.$i$suffix"
		i=$((i + 1))
	done
	;;
exec)
	load
	host "$1"
	shift
	# a UTS namespace per command: the host name is the host's, never the machine's
	exec ip netns exec "$PREFIX-h$I" unshare --uts sh -c 'hostname "$0" && exec "$@"' "h$I" "$@"
	;;
mpirun)
	load
	"$0" "$DIR" hostfile "${SLOTS:-2}" >"$DIR/hostfile"
	exec "$0" "$DIR" exec 1 env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
		mpirun --hostfile "$DIR/hostfile" \
		--mca plm_rsh_agent "$HERE/rsh-agent.sh $DIR" "$@"
	;;
pids)
	load
	host "$1"
	ip netns pids "$PREFIX-h$I"
	;;
kill)
	load
	host "$1"
	killhost "$I"
	;;
linkdown)
	load
	host "$1"
	port_state "$I" 0
	;;
linkup)
	load
	host "$1"
	port_state "$I" 3
	;;
partition)
	load
	[ $# -ge 2 ] || die "partition: give two groups or more, e.g. 1,2 3,4"
	partition "$@"
	;;
heal)
	load
	heal
	;;
netem)
	load
	[ $# -ge 1 ] || usage
	netem "$@"
	;;
selftest)
	load
	command -v python3 >/dev/null 2>&1 || skip "selftest needs python3"
	exec python3 "$HERE/selftest.py" "$DIR"
	;;
*) usage ;;
esac
