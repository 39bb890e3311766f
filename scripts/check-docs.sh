#!/bin/sh
# SPDX-License-Identifier: MIT
# check-docs.sh BUILD_DIR: the references against the code they describe, and what a user's build meets.
# - docs/environment.md is `ftcc-run --params=markdown` byte for byte (make docs-env
#   regenerates it), and every FTCC_* name the code reads or sets (lib/, transports/,
#   tools/, bindings/) has its place in it; the settings read from the environment even
#   with a struct ft_config are the ones include/ftcc.h names, as many as it says.
# - docs/errors.md has a section for exactly the codes of FT_ERROR_MAP, each quoting
#   its ft_strerror text.
# - every tool make install installs answers --version with "NAME VERSION", status 0.
# - FT_CONFIG_INIT and FT_CKPT_CONFIG_INIT compile warning-free as C11 and as C++17
#   (-pedantic -Wall -Wextra -Werror).
set -u
B=${1:?usage: scripts/check-docs.sh BUILD_DIR}
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top" || exit 1
T=$(mktemp -d "${TMPDIR:-/tmp}/ftcc-check-docs.XXXXXX")
trap 'rm -rf "$T"' EXIT
bad=0
fail() {
	echo "check-docs: $*"
	bad=1
}
env_md=docs/environment.md
err_md=docs/errors.md
hdr=include/ftcc.h
CC=${CC:-cc}
CXX=${CXX:-g++}

# --- the settings reference ---
if ! "$B/ftcc-run" --params=markdown >"$T/env.md"; then
	fail "$B/ftcc-run --params=markdown failed"
elif ! cmp -s "$T/env.md" "$env_md"; then
	fail "$env_md differs from what the code writes (run make docs-env):"
	diff "$env_md" "$T/env.md" | head -n 20
fi
# Names in quotes: getenv's and setenv's arguments and the table's entries. Not a
# variable: FTCC_EINVAL, an attribute of the Python module.
names=$(grep -rhoE "[\"']FTCC_[A-Z0-9_]+[\"'=]" lib transports tools bindings | tr -d "\"'=" |
	sort -u | grep -vx 'FTCC_EINVAL')
[ -n "$names" ] || fail "found no FTCC_ name in the sources: the search is broken"
for n in $names; do
	grep -q "\`$n\`" "$env_md" || fail "$n is read or set in the code but not in $env_md"
done
only=$(grep -E '^\| `FTCC_[A-Z0-9_]+` \|.*\| environment only \|' "$env_md" |
	sed 's/^| `\(FTCC_[A-Z0-9_]*\)`.*/\1/')
n_only=$(printf '%s\n' "$only" | grep -c .)
[ "$n_only" -gt 0 ] || fail "$env_md has no 'environment only' row: the search is broken"
for n in $only; do
	grep -q "$n\b" "$hdr" || fail "$n is read from the environment even with a struct ft_config, and $hdr does not say so"
done
grep -q "but $n_only settings" "$hdr" ||
	fail "$hdr does not say 'but $n_only settings' (the environment-only count) near struct ft_config"

# --- the error codes ---
cat >"$T/codes.c" <<'C'
#include <stdio.h>
#include "ftcc.h"
int main(void)
{
#define PRINT(name, value, msg) printf("FT_E%s\t%s\n", #name, msg);
	FT_ERROR_MAP(PRINT)
	return 0;
}
C
if ! $CC -std=c11 -Iinclude -o "$T/codes" "$T/codes.c" || ! "$T/codes" >"$T/codes.txt"; then
	fail "cannot list FT_ERROR_MAP's codes"
fi
n_codes=$(grep -c . "$T/codes.txt")
[ "$n_codes" -gt 10 ] || fail "FT_ERROR_MAP listed $n_codes codes: the listing is broken"
while IFS="$(printf '\t')" read -r name msg; do
	# the section: from its heading to the next
	sect=$(awk -v h="## $name" '$0 == h {p = 1; next} /^## / {p = 0} p' "$err_md")
	if [ -z "$sect" ]; then
		fail "$name is in FT_ERROR_MAP but has no section ('## $name') in $err_md"
		continue
	fi
	printf '%s\n' "$sect" | tr '\n' ' ' | tr -s ' ' | grep -qF "\`ft_strerror\`: \"$msg\"" ||
		fail "$err_md's $name does not quote its ft_strerror text: \"$msg\""
done <"$T/codes.txt"
for h in $(sed -n 's/^## \(FT_E[A-Z0-9_]*\)$/\1/p' "$err_md"); do
	grep -q "^$h$(printf '\t')" "$T/codes.txt" || fail "$err_md has a section for $h, which FT_ERROR_MAP does not hold"
done

# --- --version on every installed tool ---
version=$(sed -n 's/^#define FTCC_VERSION_\(MAJOR\|MINOR\|PATCH\) \([0-9]*\)$/\2/p' "$hdr" | paste -sd.)
babs=$(cd "$B" && pwd)
tools=$(sed -n 's/^TOOLS := //p' Makefile | sed 's/\$(B)\///g')
[ -n "$tools" ] || fail "no TOOLS in the Makefile: the search is broken"
for t in $tools; do
	out=$("$B/$t" --version 2>&1)
	rc=$?
	[ "$rc" -eq 0 ] || fail "$t --version exited $rc: $out"
	[ "$out" = "$t $version" ] || fail "$t --version printed '$out', not '$t $version'"
	# an option it does not know is a usage error, not a file or directory to open
	mkdir -p "$T/cwd/--no-such-option"
	out=$(cd "$T/cwd" && "$babs/$t" --no-such-option 2>&1 </dev/null)
	rc=$?
	[ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] || fail "$t --no-such-option exited $rc"
	case "$out" in *sage* | *--help*) ;; *) fail "$t --no-such-option gave no usage: $out" ;; esac
done
"$B/ftcc-run" --params=no-such-format >/dev/null 2>&1 && fail "ftcc-run --params=no-such-format was taken"

# --- the initializers, C and C++ ---
cat >"$T/init.c" <<'C'
#include "ftcc.h"
int main(void)
{
	struct ft_config cfg = FT_CONFIG_INIT;
	struct ft_ckpt_config ck = FT_CKPT_CONFIG_INIT;
	return cfg.struct_size == sizeof(cfg) && ck.struct_size == sizeof(ck) &&
			       cfg.heartbeat_ms == 100 && ck.interval == 1 ? 0 : 1;
}
C
cp "$T/init.c" "$T/init.cpp"
$CC -std=c11 -pedantic -Wall -Wextra -Werror -Iinclude -o "$T/init_c" "$T/init.c" ||
	fail "FT_CONFIG_INIT does not compile cleanly as C11 (-pedantic -Wall -Wextra -Werror)"
if command -v "$CXX" >/dev/null 2>&1; then
	$CXX -std=c++17 -pedantic -Wall -Wextra -Werror -Iinclude -o "$T/init_cxx" "$T/init.cpp" ||
		fail "FT_CONFIG_INIT does not compile cleanly as C++17 (-pedantic -Wall -Wextra -Werror)"
	[ ! -x "$T/init_cxx" ] || "$T/init_cxx" || fail "FT_CONFIG_INIT's values differ in C++"
else
	echo "check-docs: SKIPPED the C++ compile of FT_CONFIG_INIT: no $CXX (make deps installs g++)"
fi

[ "$bad" -eq 0 ] && echo "check-docs: $env_md is the code's ($(echo "$names" | wc -w) names), $err_md covers the $n_codes codes, --version on $(echo "$tools" | wc -w) tools, FT_CONFIG_INIT clean in C and C++"
exit "$bad"
