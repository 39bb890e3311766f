#!/bin/sh
# SPDX-License-Identifier: MIT
# rsh-agent.sh DIR HOST COMMAND...: Open MPI's remote shell (plm_rsh_agent) for a netns.sh cluster: runs COMMAND in the host whose address is HOST.
#
# mpirun calls its agent as it would call ssh: the host from its hostfile,
# then the words of a shell command line for the remote side (setting PATH
# and starting orted). Like ssh, this joins them and hands them to a shell,
# here inside the host's namespaces (netns.sh exec). Options before the
# host, which mpirun gives only to an agent it takes for ssh, are skipped.
#
# Like an ssh client, the agent stays on mpirun's host: it forks the remote
# side instead of becoming it, so a whole-host kill (netns.sh kill) of the
# remote host leaves it alive, and it reports the loss as ssh does: exit
# 255, and only after RSH_AGENT_LOST_DELAY seconds (3), as ssh notices a
# crashed host only after its own timeouts, long after mpirun's link to its
# daemon broke. An agent that died with its host made mpirun 4.1
# (--enable-recovery) take the daemon for one that failed to start ("ORTE
# was unable to reliably start one or more daemons"), and then now and
# again kill the surviving ranks of its own host or hang; reported late, the
# loss is ignored and mpirun keeps waiting for the lost daemon after the
# survivors exit (test/cluster/cluster_test.sh stops it).
set -eu
DIR=$1
shift
while [ $# -gt 0 ]; do
	case $1 in
	-*) shift ;;
	*) break ;;
	esac
done
[ $# -ge 2 ] || { echo "rsh-agent.sh: usage: rsh-agent.sh DIR HOST COMMAND..." >&2; exit 2; }
HOST=$1
shift
st=0
"$(dirname "$0")/netns.sh" "$DIR" exec "$HOST" sh -c "$*" || st=$?
if [ "$st" -gt 128 ]; then
	sleep "${RSH_AGENT_LOST_DELAY:-3}"
	exit 255
fi
exit "$st"
