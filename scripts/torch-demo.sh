#!/bin/sh
# SPDX-License-Identifier: MIT
# torch-demo.sh BUILD_DIR: `make torch-demo`: examples/train_ddp.py (DDP, Fashion-MNIST, 4 ranks) three times: nothing killed; rank 2 SIGKILLed under shrink; the same under rejoin, restarted; the results side by side and the loss curves in BUILD_DIR/torch-demo/loss.png.
set -eu
B=${1:?usage: scripts/torch-demo.sh BUILD_DIR}
B=$(cd "$B" && pwd)
HERE=$(cd "$(dirname "$0")/.." && pwd)
OUT=$B/torch-demo
STEPS=${FTCC_DEMO_STEPS:-600}
KILL=$((STEPS / 2))
rm -rf "$OUT" && mkdir -p "$OUT"
export PYTHONPATH="$B/python"
run() { # name policy ftcc-run-args...
	name=$1 policy=$2
	shift 2
	echo "== torch-demo: $name (FTCC_POLICY=$policy)"
	FTCC_POLICY=$policy timeout 600 "$B/ftcc-run" -n 4 --tag --timeout 500 "$@" \
		/usr/bin/python3 "$HERE/examples/train_ddp.py" --steps "$STEPS" \
		--curve "$OUT/$name.curve" $kill >"$OUT/$name.log" 2>&1 || true
	grep -E "accuracy|SIGKILL|rejoined|killed|restarted" "$OUT/$name.log" || true
}
kill=""
run free rejoin
kill="--kill-rank 2 --kill-step $KILL"
run shrink shrink --ignore-killed
run rejoin rejoin --restart
/usr/bin/python3 - "$OUT" <<'PY'
import re, sys
out = sys.argv[1]
res = {}
for name in ("free", "shrink", "rejoin"):
    text = open(f"{out}/{name}.log").read()
    rows = re.findall(r"rank (\d+): accuracy ([0-9.]+) digest ([0-9a-f]+) members (\d+)", text)
    res[name] = {int(r): (float(a), d, int(m)) for r, a, d, m in rows}
def one(name, i):
    vals = {v[i] for v in res[name].values()}
    return vals.pop() if len(vals) == 1 else None
print()
print("| run | ranks that finished | test accuracy % | model + optimizer digest |")
print("| --- | --- | --- | --- |")
for name in ("free", "shrink", "rejoin"):
    print(f"| {name} | {sorted(res[name])} | {one(name, 0)} | {one(name, 1)} |")
ok = True
free_acc, free_dig = one("free", 0), one("free", 1)
if len(res["free"]) != 4 or free_dig is None:
    print("torch-demo: the failure-free run did not finish on 4 ranks with one model"); ok = False
if sorted(res["shrink"]) != [0, 1, 3] or one("shrink", 1) is None:
    print("torch-demo: shrink: the 3 survivors did not finish with one model"); ok = False
elif free_acc is not None and abs(one("shrink", 0) - free_acc) > 0.5:
    print(f"torch-demo: shrink: accuracy {one('shrink', 0)} is more than 0.5 pp from {free_acc}")
    ok = False
if len(res["rejoin"]) != 4 or one("rejoin", 1) != free_dig:
    print("torch-demo: rejoin: not every rank ended bit-identical to the failure-free run"); ok = False
if ok:
    print(f"torch-demo: shrink within {abs(one('shrink', 0) - free_acc):.2f} pp of the "
          "failure-free accuracy; rejoin bit-identical on every rank (the restarted one too)")
sys.exit(0 if ok else 1)
PY
status=$?
if command -v gnuplot >/dev/null 2>&1; then
	gnuplot -e "set terminal png size 900,500; set output '$OUT/loss.png';
		set xlabel 'step'; set ylabel 'training loss (rank 0, smoothed)';
		set title 'DDP on Fashion-MNIST over ftcc: rank 2 SIGKILLed at step $KILL';
		plot '$OUT/free.curve' using 1:2 smooth bezier title 'nothing killed',
		     '$OUT/shrink.curve' using 1:2 smooth bezier title 'shrink (3 ranks go on)',
		     '$OUT/rejoin.curve' using 1:2 smooth bezier title 'rejoin (restarted, exact)'" &&
		echo "torch-demo: loss curves in $OUT/loss.png"
fi
exit $status
