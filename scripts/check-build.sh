#!/bin/sh
# SPDX-License-Identifier: MIT
# check-build.sh: a change of what the build detects rebuilds what was built
# before it, and make says which optional part it leaves out and why.
# As a new user would: the library built while libfabric "was missing"
# (HAVE_FABRIC= by hand), then built again once it is found; the second
# build must rebuild the objects and carry the fabric transport. Built at
# -O0 in a scratch directory (a few seconds).
set -u
B=$(mktemp -d "${TMPDIR:-/tmp}/ftcc-check-build.XXXXXX")
trap 'rm -rf "$B"' EXIT
top=$(dirname "$0")/..
if ! pkg-config --exists libfabric 2>/dev/null; then
	echo "check-build: SKIPPED: libfabric is not installed, so its appearing cannot be tried"
	exit 0
fi
mk() { MAKEFLAGS= make -s -j2 -C "$top" B="$B" CFLAGS=-O0 "$@" lib 2>&1; }
out=$(mk HAVE_FABRIC=) || { printf '%s\n' "$out"; echo "check-build: the build without libfabric failed"; exit 1; }
case $out in
*"building without the libfabric transport"*) ;;
*) printf '%s\n' "$out"; echo "check-build: make did not say it builds without libfabric"; exit 1 ;;
esac
if nm "$B/libftcc.a" 2>/dev/null | grep -q ' ft__fabric_ops$'; then
	echo "check-build: the library has the fabric transport although it was left out"
	exit 1
fi
before=$(stat -c %y "$B/lib/core/comm.o")
sleep 0.1
out=$(mk) || { printf '%s\n' "$out"; echo "check-build: the build with libfabric failed"; exit 1; }
case $out in
*"building without the libfabric transport"*)
	printf '%s\n' "$out"
	echo "check-build: libfabric found, yet make still builds without it"
	exit 1
	;;
esac
case $out in
*"rebuilding"*) ;;
*) printf '%s\n' "$out"; echo "check-build: make did not say the flags changed"; exit 1 ;;
esac
after=$(stat -c %y "$B/lib/core/comm.o")
if [ "$before" = "$after" ]; then
	echo "check-build: lib/core/comm.o was not rebuilt when libfabric appeared"
	exit 1
fi
if ! nm "$B/libftcc.a" | grep -q ' ft__fabric_ops$'; then
	echo "check-build: libfabric appeared, yet the library has no fabric transport"
	exit 1
fi
echo "check-build: libfabric appearing rebuilt the library with the fabric transport; make said what it left out"
