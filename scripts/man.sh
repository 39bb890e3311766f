#!/bin/sh
# SPDX-License-Identifier: MIT
# man.sh build OUTDIR VERSION | names: the man pages. Each man/NAME.SECTION.md
# (Markdown) becomes OUTDIR/NAME.SECTION through lowdown; every other name its
# NAME line lists (`ft_rank, ft_size - ...`) gets a page of its own that
# sources it (`.so man3/ft_rank.3`), so that `man ft_size` finds it too.
# `names` prints every page file name, sources and links, one a line (what
# make install puts under share/man and make uninstall removes).
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
what=${1:?usage: scripts/man.sh build OUTDIR VERSION | names}

# The names a page's NAME section lists, before its " - ".
page_names() {
	awk '/^# NAME/ { on = 1; next } on && NF { sub(/ [-\\]+ .*/, ""); gsub(/,/, " "); print; exit }' "$1"
}

# The error codes of ftcc.h's FT_ERROR_MAP as a list: name (value), message.
# shellcheck disable=SC2016 # backquotes: Markdown code, not a command
error_list() {
	sed -n '/^#define FT_ERROR_MAP/,/^$/p' "$top/include/ftcc.h" | tr -d '\\\n' | tr -s ' \t' ' ' |
		grep -o 'XX( *[A-Z]*, *[^,]*, *"[^"]*")' |
		sed 's/XX( *\([A-Z]*\), *\([^,]*\), *"\([^"]*\)")/`FT_E\1` (\2)\n:   \3\n/'
}

# each_page: "SOURCE PAGE SECTION NAME..." for every man/*.md
each_page() {
	for src in "$top"/man/*.md; do
		[ -e "$src" ] || continue
		page=$(basename "$src" .md)
		sect=${page##*.}
		# shellcheck disable=SC2046
		echo "$src $page $sect $(page_names "$src")"
	done
}

case $what in
names)
	each_page | while read -r _src page sect names; do
		echo "$page"
		for n in $names; do
			[ "$n.$sect" = "$page" ] || echo "$n.$sect"
		done
	done
	;;
build)
	out=${2:?usage: scripts/man.sh build OUTDIR VERSION}
	version=${3:?usage: scripts/man.sh build OUTDIR VERSION}
	command -v lowdown >/dev/null 2>&1 ||
		{ echo "man.sh: lowdown is not installed (apt-get install lowdown, or make deps)" >&2; exit 1; }
	mkdir -p "$out"
	rm -f "$out"/*.1 "$out"/*.3 "$out"/*.7
	error_list >"$out/.errors.md"
	each_page | while read -r src page sect names; do
		# A line @INCLUDE path@ takes that file of the repository in its
		# place, its headings one level down and its own title left out
		# (ftcc-env.7 is docs/environment.md); when that file is missing,
		# the lines that follow up to @END@ stand in for it. A line @ERRORS@
		# is the list of ftcc.h's error codes and messages. Its tables
		# become lists (a man page is 80 columns): each row's first cell,
		# then "column: cell" for the others.
		awk -v top="$top" -v errors="$out/.errors.md" '
			function cells(l, a,   n, i) {
				n = split(l, a, "|")
				for (i = 2; i < n; i++) { sub(/^ +/, "", a[i]); sub(/ +$/, "", a[i]) }
				return n - 2
			}
			function row(l,   c, n, i, d) {
				n = cells(l, c)
				d = ""
				for (i = 2; i <= n; i++)
					if (c[i + 1] != "")
						d = d (d == "" ? "" : "; ") head[i + 1] ": " c[i + 1]
				print c[2]
				print ":   " d
				print ""
			}
			/^@INCLUDE [^@]*@$/ {
				f = top "/" substr($2, 1, length($2) - 1)
				if ((getline line < f) > 0) {
					skip = 1
					do {
						if (line ~ /^# /) continue
						if (line ~ /^##/) line = substr(line, 2)
						if (line ~ /^\|/) {
							if (!intable) { cells(line, head); intable = 1; continue }
							if (line ~ /^\| *:?---/) continue
							row(line)
							continue
						}
						intable = 0
						print line
					} while ((getline line < f) > 0)
				}
				next
			}
			/^@ERRORS@$/ { while ((getline line < errors) > 0) print line; close(errors); next }
			/^@END@$/ { skip = 0; next }
			!skip' "$src" >"$out/.$page.md"
		# --parse-no-intraemph: ft_rank_x is a name, not emphasis
		lowdown -s -Tman --parse-no-intraemph -M "source=ftcc $version" \
			-M "section=$sect" -o "$out/$page" "$out/.$page.md"
		rm -f "$out/.$page.md"
		for n in $names; do
			[ "$n.$sect" = "$page" ] || printf '.so man%s/%s\n' "$sect" "$page" >"$out/$n.$sect"
		done
	done
	rm -f "$out/.errors.md"
	;;
*)
	echo "usage: scripts/man.sh build OUTDIR VERSION | names" >&2
	exit 2
	;;
esac
