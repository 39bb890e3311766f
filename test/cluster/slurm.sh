#!/bin/sh
# SPDX-License-Identifier: MIT
# slurm.sh DIR COMMAND [ARGS]: a real Slurm cluster (slurmctld, one slurmd per host, munge) on a namespace cluster made by netns.sh.
#
# DIR is the namespace cluster's directory (netns.sh DIR create N). The
# Slurm cluster lives in DIR/slurm: its slurm.conf (nodes h1..hN at the
# hosts' addresses, CPUs=2 each, one partition), a munge key and munged's
# socket, the controller's state, each node's spool and log. munged runs in
# the root namespace (its socket is a file every host sees); slurmctld in
# host 1; slurmd in every host, each in a mount namespace of its own where
# DIR/slurm/pmix is that host's own directory: Slurm's PMIx plugin makes
# its per-step directories under that name, and the hosts share one file
# system. No cgroup is used (proctrack/linuxproc, task/none); cgroup v1 is
# named only because slurmd 22.05 initializes the cgroup plugin anyway.
#
# Commands:
#   start             write the configuration, start the daemons, wait until
#                     every node is idle (exit 77 and SKIPPED when Slurm or
#                     munge is not installed)
#   stop              stop every daemon (safe when half started); DIR/slurm
#                     stays (netns.sh destroy leaves DIR when it holds it)
#   slurmd HOST       start the slurmd of host HOST (again: after `netns.sh kill`),
#                     and wait until its node is back in service
#   run CMD...        CMD in host 1 with SLURM_CONF set (srun, sbatch, sinfo,
#                     scontrol, squeue...)
set -eu

HERE=$(cd "$(dirname "$0")" && pwd)
NETNS=$HERE/netns.sh

[ $# -ge 2 ] || { sed -n '3,/^set -eu/p' "$0" | sed '$d;s/^# \{0,1\}//' >&2; exit 2; }
DIR=$1
CMD=$2
shift 2
[ -f "$DIR/cluster" ] || { echo "slurm.sh: $DIR is not a namespace cluster (netns.sh DIR create N)" >&2; exit 1; }
# shellcheck disable=SC1091
. "$DIR/cluster"
S=$DIR/slurm
export SLURM_CONF="$S/slurm.conf"

skip() {
	echo "SKIPPED: $*"
	exit 77
}

in_host() { # HOST CMD...
	h=$1
	shift
	"$NETNS" "$DIR" exec "$h" "$@"
}

wait_idle() { # NODES-WANTED DEADLINE-S: until sinfo shows that many idle nodes
	t=0
	while [ "$t" -lt $(($2 * 10)) ]; do
		n=$(in_host 1 sinfo -h -N -t idle -o '%N' 2>/dev/null | sort -u | wc -l)
		[ "$n" -ge "$1" ] && return 0
		sleep 0.1
		t=$((t + 1))
	done
	echo "slurm.sh: only $n of $1 nodes idle after $2 s:" >&2
	in_host 1 sinfo -N >&2 || true
	tail -5 "$S"/slurmd-*.log "$S/slurmctld.log" >&2 || true
	return 1
}

start_slurmd() { # HOST
	mkdir -p "$S/pmix-h$1" "$S/spool-h$1"
	rm -f "$S/slurmd-h$1.pid"
	# shellcheck disable=SC2016
	in_host "$1" unshare --mount --propagation private sh -c \
		'mount --bind "$0/pmix-h$1" "$0/pmix" && exec slurmd -f "$0/slurm.conf"' "$S" "$1"
}

start() {
	for p in slurmctld slurmd srun munged; do
		command -v "$p" >/dev/null 2>&1 || skip "Slurm cluster: $p is not installed (make cluster-test installs slurm-wlm and munge)"
	done
	# a cluster of its own: nothing of an earlier one's state
	rm -rf "$S/state" "$S"/spool-* "$S"/pmix*
	mkdir -p "$S/state" "$S/pmix"
	chmod 700 "$S"
	[ -f "$S/munge.key" ] || { dd if=/dev/urandom of="$S/munge.key" bs=1024 count=1 2>/dev/null && chmod 400 "$S/munge.key"; }
	munged --force --key-file="$S/munge.key" --socket="$S/munge.sock" --pid-file="$S/munged.pid" \
		--log-file="$S/munged.log" --seed-file="$S/munged.seed"
	cat >"$S/slurm.conf" <<EOF
ClusterName=$PREFIX
SlurmctldHost=h1($NET.1)
SlurmctldPort=6817
SlurmdPort=6818
AuthType=auth/munge
AuthInfo=socket=$S/munge.sock
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
StateSaveLocation=$S/state
SlurmdSpoolDir=$S/spool-%n
SlurmctldPidFile=$S/slurmctld.pid
SlurmdPidFile=$S/slurmd-%n.pid
SlurmctldLogFile=$S/slurmctld.log
SlurmdLogFile=$S/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SlurmdParameters=config_overrides
ReturnToService=2
SlurmdTimeout=10
SlurmctldTimeout=10
InactiveLimit=0
KillWait=2
MinJobAge=2
EOF
	i=1
	while [ "$i" -le "$N" ]; do
		echo "NodeName=h$i NodeAddr=$NET.$i CPUs=2 State=UNKNOWN" >>"$S/slurm.conf"
		i=$((i + 1))
	done
	echo "PartitionName=all Nodes=ALL Default=YES MaxTime=INFINITE State=UP" >>"$S/slurm.conf"
	printf 'CgroupPlugin=cgroup/v1\nCgroupMountpoint=/sys/fs/cgroup\n' >"$S/cgroup.conf"
	echo "PMIxCliTmpDirBase=$S/pmix" >"$S/mpi.conf"
	in_host 1 slurmctld -f "$S/slurm.conf"
	i=1
	while [ "$i" -le "$N" ]; do
		start_slurmd "$i"
		i=$((i + 1))
	done
	wait_idle "$N" 30
}

stop() {
	for f in "$S"/slurmd-*.pid "$S/slurmctld.pid" "$S/munged.pid"; do
		[ -f "$f" ] || continue
		p=$(cat "$f" 2>/dev/null || true)
		if [ -n "$p" ]; then kill "$p" 2>/dev/null || true; fi
	done
	# the controller and the nodes exit within KillWait; munged last
	t=0
	while [ "$t" -lt 50 ]; do
		alive=""
		for f in "$S"/slurmd-*.pid "$S/slurmctld.pid" "$S/munged.pid"; do
			[ -f "$f" ] && p=$(cat "$f" 2>/dev/null) && [ -n "$p" ] && kill -0 "$p" 2>/dev/null && alive="$alive $p"
		done
		[ -z "$alive" ] && break
		sleep 0.1
		t=$((t + 1))
	done
	# shellcheck disable=SC2086
	[ -z "${alive:-}" ] || kill -9 $alive 2>/dev/null || true
}

case $CMD in
start) start ;;
stop) stop ;;
slurmd)
	[ $# -eq 1 ] || { echo "slurm.sh: slurmd HOST" >&2; exit 2; }
	start_slurmd "$1"
	t=0
	until in_host 1 sinfo -h -n "h$1" -t idle -o '%N' 2>/dev/null | grep -q "h$1"; do
		[ "$t" -lt 300 ] || { echo "slurm.sh: node h$1 not idle after 30 s" >&2; in_host 1 sinfo -N >&2; exit 1; }
		sleep 0.1
		t=$((t + 1))
	done
	;;
run) in_host 1 "$@" ;;
*) echo "slurm.sh: unknown command $CMD" >&2; exit 2 ;;
esac
