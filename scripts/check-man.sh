#!/bin/sh
# SPDX-License-Identifier: MIT
# check-man.sh BUILD_DIR [PREFIX]: what a user finds after make install.
# Installs BUILD_DIR into a fresh prefix (or checks PREFIX, installed
# already), then: `man -w` finds ft_allreduce and ftcc-run with MANPATH set
# to the prefix's pages only; every function ftcc.h declares has a page;
# every example under examples/ builds with `cc ... $(pkg-config --cflags
# --libs ftcc)` against the prefix; examples/allreduce.cpp builds with g++
# and runs on 2 ranks under the installed ftcc-run.
set -u
B=${1:?usage: scripts/check-man.sh BUILD_DIR [PREFIX]}
top=$(cd "$(dirname "$0")/.." && pwd)
W=$(mktemp -d "${TMPDIR:-/tmp}/ftcc-check-man.XXXXXX")
trap 'rm -rf "$W"' EXIT
fail() { echo "check-man: FAILED: $*"; exit 1; }
if [ -n "${2:-}" ]; then
	P=$2
else
	P=$W/prefix
	make -s -C "$top" B="$B" PREFIX="$P" install >"$W/install.log" 2>&1 ||
		{ cat "$W/install.log"; fail "make install PREFIX=$P failed"; }
fi
command -v lowdown >/dev/null 2>&1 ||
	fail "lowdown is not installed, so make install installed no man pages (make deps installs it)"

# The functions ftcc.h declares: `type name(` at the start of a line, and
# the function-like macros that stand for one (ft_config_from_env).
funcs=$(sed -n -e 's/^[a-z_][a-z0-9_ ]*[ *]\(ft_[a-z0-9_]*\)(.*/\1/p' \
	-e 's/^#define \(ft_[a-z0-9_]*\)(.*/\1/p' "$top/include/ftcc.h" | sort -u)
n=$(echo "$funcs" | wc -w)
[ "$n" -ge 25 ] || fail "found only $n functions in include/ftcc.h: the parse is broken"

if ! command -v man >/dev/null 2>&1; then
	echo "check-man: SKIPPED the man lookups: man is not installed (man-db: make deps); checking the files only"
	missing=""
	for f in $funcs; do
		[ -f "$P/share/man/man3/$f.3" ] || missing="$missing $f"
	done
	for p in man1/ftcc-run.1 man1/ftcc-log.1 man1/ftcc-ckpt.1 man7/ftcc.7 man7/ftcc-env.7; do
		[ -f "$P/share/man/$p" ] || missing="$missing $p"
	done
else
	missing=""
	for f in $funcs; do
		MANPATH="$P/share/man" man -w 3 "$f" >/dev/null 2>&1 || missing="$missing $f"
	done
	for p in 1:ftcc-run 1:ftcc-log 1:ftcc-ckpt 7:ftcc 7:ftcc-env; do
		MANPATH="$P/share/man" man -w "${p%%:*}" "${p#*:}" >/dev/null 2>&1 || missing="$missing ${p#*:}(${p%%:*})"
	done
	# what a user types, after the MANPATH that make install printed
	MANPATH="$P/share/man" man -w ft_allreduce >/dev/null 2>&1 || missing="$missing ft_allreduce"
	MANPATH="$P/share/man" man -w ftcc-run >/dev/null 2>&1 || missing="$missing ftcc-run"
	# a page renders (no troff errors)
	MANPATH="$P/share/man" MANWIDTH=80 man 3 ft_allreduce 2>"$W/man.err" | grep -q 'RETURN VALUE' ||
		fail "man 3 ft_allreduce does not render: $(cat "$W/man.err")"
fi
[ -z "$missing" ] || fail "no man page under $P/share/man for:$missing (add man/<name>.<section>.md, or the name to a family page's NAME line)"
# ft_strerror(3) lists every code of FT_ERROR_MAP (scripts/man.sh writes the list)
codes=$(sed -n '/^#define FT_ERROR_MAP/,/^$/p' "$top/include/ftcc.h" | grep -o 'XX( *[A-Z]*' | sed 's/XX( *//')
[ "$(echo "$codes" | wc -w)" -ge 20 ] || fail "found only $(echo "$codes" | wc -w) codes in FT_ERROR_MAP: the parse is broken"
for c in $codes; do
	grep -qF "FT_E$c\\fR (" "$P/share/man/man3/ft_strerror.3" || missing="$missing FT_E$c"
done
[ -z "$missing" ] || fail "ft_strerror(3) does not list:$missing"

# The examples, standalone, as a user builds them from the installed prefix.
export PKG_CONFIG_PATH="$P/lib/pkgconfig"
cflags=$(pkg-config --cflags ftcc) || fail "pkg-config does not find ftcc in $P"
libs=$(pkg-config --libs ftcc) || fail "pkg-config does not find ftcc in $P"
built=0
for src in "$top"/examples/*.c; do
	name=$(basename "$src" .c)
	# an example that includes <math.h> links libm as its user would
	lm=""
	grep -q '#include <math.h>' "$src" && lm=-lm
	# shellcheck disable=SC2086
	cc -O0 -o "$W/$name" "$src" $cflags $libs $lm 2>"$W/cc.log" ||
		{ cat "$W/cc.log"; fail "examples/$name.c does not build with cc \$(pkg-config --cflags --libs ftcc)${lm:+ -lm}"; }
	built=$((built + 1))
done
# shellcheck disable=SC2086
g++ -O0 -std=c++17 -pedantic -Wall -Wextra -Werror -o "$W/allreduce_cpp" "$top/examples/allreduce.cpp" \
	$cflags $libs 2>"$W/cxx.log" ||
	{ cat "$W/cxx.log"; fail "examples/allreduce.cpp does not build with g++ \$(pkg-config --cflags --libs ftcc)"; }
LD_LIBRARY_PATH="$P/lib" timeout 60 "$P/bin/ftcc-run" -n 2 "$W/allreduce_cpp" >"$W/run.log" 2>&1 ||
	{ cat "$W/run.log"; fail "examples/allreduce.cpp on 2 ranks under the installed ftcc-run"; }
[ "$(grep -c 'allreduce of 1000 doubles correct' "$W/run.log")" = 2 ] ||
	{ cat "$W/run.log"; fail "examples/allreduce.cpp: not both ranks said correct"; }
echo "check-man: $n functions of ftcc.h and the 5 other pages found by man under $P/share/man; $built C examples and examples/allreduce.cpp built through pkg-config; the C++ one ran on 2 ranks"
