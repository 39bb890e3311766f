#!/bin/sh
# SPDX-License-Identifier: MIT
# install-extras.sh install|uninstall B DESTDIR PREFIX LIBDIR BINDIR MANDIR PYTHON:
# make install's and make uninstall's second half: the man pages (B/man, from
# make man), the Python package (B/python/ftcc, from make torch) where PYTHON
# finds it for that prefix, and, after install, the variables a user sets to
# use a prefix the system does not search.
set -eu
[ $# -eq 8 ] || { echo "usage: $0 install|uninstall B DESTDIR PREFIX LIBDIR BINDIR MANDIR PYTHON" >&2; exit 2; }
what=$1 B=$2 D=$3 PREFIX=$4 LIBDIR=$5 BINDIR=$6 MANDIR=$7 PY=$8
top=$(cd "$(dirname "$0")/.." && pwd)

# Where PYTHON looks for packages under PREFIX: the first of
# PREFIX/lib/python3/dist-packages (Debian's /usr) and
# PREFIX/lib/python3.X/dist-packages (Debian's /usr/local) on its sys.path;
# else PREFIX/lib/python3/dist-packages, which PYTHONPATH must then name.
pydir() {
	"$PY" - "$PREFIX" <<'PY' 2>/dev/null || echo "$PREFIX/lib/python3/dist-packages"
import os, sys
p = sys.argv[1].rstrip("/") or "/"
ver = "python%d.%d" % sys.version_info[:2]
cands = [os.path.join(p, "lib", "python3", "dist-packages"), os.path.join(p, "lib", ver, "dist-packages")]
print(next((c for c in cands if c in sys.path), cands[0]))
PY
}
pyfound() {
	"$PY" -c 'import sys; sys.exit(0 if sys.argv[1] in sys.path else 1)' "$1" 2>/dev/null
}

case $what in
install)
	man=""
	if [ -f "$B/man/.built" ]; then
		for s in 1 3 7; do
			set -- "$B"/man/*."$s"
			[ -e "$1" ] || continue
			install -d "$D$MANDIR/man$s"
			install -m 644 "$@" "$D$MANDIR/man$s/"
		done
		man=1
		echo "ftcc: man pages installed in $MANDIR/man1, man3, man7"
	else
		echo "ftcc: NO MAN PAGES INSTALLED: $B/man is not built (lowdown is missing: apt-get install lowdown, or make deps; then make man)"
	fi
	py=""
	if ls "$B"/python/ftcc/_C*.so >/dev/null 2>&1; then
		py=$(pydir)
		install -d "$D$py/ftcc"
		install -m 644 "$B"/python/ftcc/*.py "$D$py/ftcc/"
		install -m 755 "$B"/python/ftcc/_C*.so "$D$py/ftcc/"
		echo "ftcc: Python package ftcc (import ftcc.torch) installed in $py"
	else
		echo "ftcc: no Python package installed: $B/python/ftcc is not built (Debian's PyTorch: make deps-torch, then make torch)"
	fi
	# What to set: each path the system's tools do not search already.
	set_lines=""
	add() { set_lines="$set_lines
  $1"; }
	ldirs=$({ /sbin/ldconfig -N -v 2>/dev/null || ldconfig -N -v 2>/dev/null || :; } |
		sed -n 's|^\(/[^:]*\):.*|\1|p')
	if ! printf "%s\n/lib\n/usr/lib\n" "$ldirs" | grep -qx "$LIBDIR"; then
		add "export LD_LIBRARY_PATH=$LIBDIR\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}   # or, as root: echo $LIBDIR > /etc/ld.so.conf.d/ftcc.conf && ldconfig"
	elif [ -z "$D" ] && [ "$LIBDIR" != /lib ] && [ "$LIBDIR" != /usr/lib ]; then
		# a directory the loader's cache lists: the cache must learn the new library
		if [ "$(id -u)" -eq 0 ]; then
			/sbin/ldconfig 2>/dev/null || ldconfig 2>/dev/null || add "ldconfig   # as root: the loader's cache must learn libftcc.so.0"
		else
			add "sudo ldconfig   # the loader's cache must learn libftcc.so.0"
		fi
	fi
	pcpath=$(pkg-config --variable pc_path pkg-config 2>/dev/null || :)
	case ":$pcpath:" in
	*":$LIBDIR/pkgconfig:"*) ;;
	*) add "export PKG_CONFIG_PATH=$LIBDIR/pkgconfig\${PKG_CONFIG_PATH:+:\$PKG_CONFIG_PATH}" ;;
	esac
	if [ -n "$man" ]; then
		# man-db's search path without MANPATH; a trailing ':' keeps it
		mp=$(env -u MANPATH manpath 2>/dev/null || :)
		case ":$mp:" in
		*":$MANDIR:"*) ;;
		*) add "export MANPATH=$MANDIR:   # the ':' keeps the system's pages" ;;
		esac
	fi
	if [ -n "$py" ] && ! pyfound "$py"; then
		add "export PYTHONPATH=$py\${PYTHONPATH:+:\$PYTHONPATH}"
	fi
	case ":$PATH:" in
	*":$BINDIR:"*) ;;
	*) add "export PATH=$BINDIR:\$PATH" ;;
	esac
	if [ -n "$set_lines" ]; then
		echo "ftcc: installed in $PREFIX${D:+ (staged under $D)}. To use it from there, set:$set_lines"
	else
		echo "ftcc: installed in $PREFIX${D:+ (staged under $D)}: the system finds it as it is (nothing to set)"
	fi
	;;
uninstall)
	for page in $("$top/scripts/man.sh" names); do
		rm -f "$D$MANDIR/man${page##*.}/$page"
	done
	py=$(pydir)
	if [ -f "$D$py/ftcc/torch.py" ]; then
		rm -f "$D$py/ftcc/"*.py "$D$py/ftcc/"_C*.so
		rm -rf "$D$py/ftcc/__pycache__"
		rmdir "$D$py/ftcc" 2>/dev/null || :
	fi
	;;
*)
	echo "usage: $0 install|uninstall B DESTDIR PREFIX LIBDIR BINDIR MANDIR PYTHON" >&2
	exit 2
	;;
esac
