#!/bin/sh
# rsh-agent.sh DIR HOST COMMAND...: Open MPI's remote shell (plm_rsh_agent) for a netns.sh cluster: runs COMMAND in the host whose address is HOST.
#
# mpirun calls its agent as it would call ssh: the host from its hostfile,
# then the words of a shell command line for the remote side (setting PATH
# and starting orted). Like ssh, this joins them and hands them to a shell,
# here inside the host's namespaces (netns.sh exec). Options before the
# host, which mpirun gives only to an agent it takes for ssh, are skipped.
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
exec "$(dirname "$0")/netns.sh" "$DIR" exec "$HOST" sh -c "$*"
