#!/bin/sh
# SPDX-License-Identifier: MIT
# check-lib.sh BUILD_DIR: what the library may and may not do to its process, checked on the built objects.
# - Only config.o reads the environment (getenv): every variable is read once, at ft_init.
# - No object changes process-global state that the application's threads share:
#   setenv/putenv/unsetenv/clearenv, atexit/on_exit.
# - libftcc.so exports the functions include/ftcc.h declares, and nothing else.
# - libftcc.so does not link libfabric (loaded at run time, by the fabric transport).
set -u
B=${1:?usage: scripts/check-lib.sh BUILD_DIR}
bad=0
syms=$(nm -A -u "$B/libftcc.a" 2>/dev/null) || { echo "check-lib: cannot read $B/libftcc.a"; exit 1; }
env_readers=$(printf '%s\n' "$syms" | awk '$NF ~ /^(getenv|secure_getenv)$/ {print $1}' | grep -v ':config.o:' || true)
if [ -n "$env_readers" ]; then
	echo "check-lib: reads the environment outside config.c: $env_readers"
	bad=1
fi
globals=$(printf '%s\n' "$syms" | awk '$NF ~ /^(setenv|putenv|unsetenv|clearenv|atexit|on_exit)$/ {print $1 " " $NF}')
if [ -n "$globals" ]; then
	echo "check-lib: changes process-global state: $globals"
	bad=1
fi
api=$(dirname "$0")/../include/ftcc.h
internal=$(nm -D --defined-only "$B/libftcc.so" | awk '$2 ~ /[TDBR]/ {print $3}' | grep -v '^_' |
	while read -r s; do grep -q "[^a-z_]$s(" "$api" || echo "$s"; done)
if [ -n "$internal" ]; then
	echo "check-lib: libftcc.so exports more than the API: $internal"
	bad=1
fi
# libfabric is loaded when a fabric transport opens (transports/fabric/dl.c):
# linked, it would start libpsm's constructors (0.2 s of sleep) and crash
# handlers in every program that links ftcc.
if readelf -d "$B/libftcc.so" | grep -q 'NEEDED.*libfabric'; then
	echo "check-lib: libftcc.so links libfabric; it must be loaded only when a fabric transport opens"
	bad=1
fi
[ "$bad" -eq 0 ] && echo "check-lib: environment read in config.c only; no setenv/atexit; only the API exported; libfabric not linked"
exit "$bad"
