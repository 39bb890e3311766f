#!/bin/sh
# SPDX-License-Identifier: MIT
# check-install.sh BUILD_DIR: `make install PREFIX=` into a fresh directory,
# then a program built through pkg-config against it, shared and static,
# runs a 2-rank allreduce under the installed ftcc-run (over TCP, and over
# libfabric's shm when it is there).
set -u
B=${1:?usage: scripts/check-install.sh BUILD_DIR}
top=$(cd "$(dirname "$0")/.." && pwd)
P=$(mktemp -d "${TMPDIR:-/tmp}/ftcc-check-install.XXXXXX")
trap 'rm -rf "$P"' EXIT
fail() { echo "check-install: $*"; exit 1; }
make -s -C "$top" B="$B" PREFIX="$P/prefix" install >"$P/install.log" 2>&1 ||
	{ cat "$P/install.log"; fail "make install PREFIX=$P/prefix failed"; }
for f in include/ftcc.h lib/libftcc.a lib/libftcc.so lib/libftcc.so.0 lib/pkgconfig/ftcc.pc bin/ftcc-run; do
	[ -e "$P/prefix/$f" ] || fail "make install left out $f"
done
cat >"$P/app.c" <<'C'
#include <ftcc.h>
#include <stdio.h>
int main(void)
{
	struct ft_comm *c;
	float x[3] = {1, 2, 3};
	int rc = ft_init(NULL, &c);
	if (rc != 0) {
		fprintf(stderr, "ft_init: %s\n", ft_strerror(rc));
		return 1;
	}
	rc = ft_allreduce(c, FT_IN_PLACE, x, 3, FT_FLOAT32, FT_SUM, NULL);
	int n = ft_size(c);
	ft_finalize(c);
	if (rc != 0 || x[0] != n || x[1] != 2 * n || x[2] != 3 * n) {
		fprintf(stderr, "allreduce: %s, %g %g %g\n", ft_strerror(rc), x[0], x[1], x[2]);
		return 1;
	}
	return 0;
}
C
export PKG_CONFIG_PATH="$P/prefix/lib/pkgconfig"
# shellcheck disable=SC2046
cc -o "$P/app_shared" "$P/app.c" $(pkg-config --cflags --libs ftcc) -Wl,-rpath,"$P/prefix/lib" ||
	fail "a program does not build against the installed library (pkg-config --cflags --libs ftcc)"
# shellcheck disable=SC2046
cc -o "$P/app_static" "$P/app.c" $(pkg-config --cflags ftcc) "$P/prefix/lib/libftcc.a" \
	$(pkg-config --libs-only-other --libs-only-L --static ftcc) \
	$(pkg-config --libs-only-l --static ftcc | sed 's/-lftcc//') ||
	fail "a program does not build against the installed static library (pkg-config --static)"
# one version: the header's FTCC_VERSION is the .pc file's
printf '#include <ftcc.h>\n#include <stdio.h>\nint main(void) { puts(FTCC_VERSION); return 0; }\n' \
	>"$P/version.c"
# shellcheck disable=SC2046
cc -o "$P/version" "$P/version.c" $(pkg-config --cflags ftcc) || fail "FTCC_VERSION does not build"
[ "$("$P/version")" = "$(pkg-config --modversion ftcc)" ] ||
	fail "ftcc.pc says version $(pkg-config --modversion ftcc), ftcc.h $("$P/version")"
transports=tcp
if command -v fi_info >/dev/null 2>&1 && fi_info -p shm >/dev/null 2>&1 &&
	grep -q FTCC_HAVE_FABRIC=1 "$B/.flags" 2>/dev/null; then
	transports="tcp fabric"
fi
for app in app_shared app_static; do
	for t in $transports; do
		FTCC_TRANSPORT=$t FI_PROVIDER=shm timeout 60 "$P/prefix/bin/ftcc-run" -n 2 "$P/$app" \
			>"$P/run.log" 2>&1 || { cat "$P/run.log"; fail "$app over $t failed"; }
	done
done
echo "check-install: installed into a fresh prefix; programs built through pkg-config (shared, static) ran over: $transports"
