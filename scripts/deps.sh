#!/bin/sh
# SPDX-License-Identifier: MIT
# deps.sh [PKG...]: install the Debian packages ftcc's build, tests, demo and benchmarks need,
# or, given names, only those (optional parts: `deps.sh afl++` for make fuzz).
# Runs apt-get as root or through sudo, and says what it installs.
set -eu
PKGS="build-essential pkg-config libssl-dev libfabric-dev libfabric-bin liburing-dev libcriterion-dev
openmpi-bin libopenmpi-dev libpmix-dev mpich libmpich-dev libgloo-dev gnuplot-nox strace iproute2
python3 slurmctld slurmd slurm-client munge nftables lowdown man-db"
[ $# -gt 0 ] && PKGS="$*"
missing=""
for p in $PKGS; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" ||
		missing="$missing $p"
done
[ -z "$missing" ] && exit 0
echo "deps: installing Debian packages:$missing"
if [ "$(id -u)" -eq 0 ]; then SUDO=""; else SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
# shellcheck disable=SC2086
$SUDO apt-get install -y -qq $missing
