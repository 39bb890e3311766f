#!/bin/sh
# SPDX-License-Identifier: MIT
# bench-torch.sh BUILD_DIR: `make bench-torch`: torch.distributed all_reduce and a DDP step through ftcc against PyTorch's own Gloo, and the binding against ft_allreduce from C; interleaved rounds.
#
# Every round runs, for each world size, the Gloo job, the ftcc job and
# ftbench (C, in place, float32 sum) back to back, each under ftcc-run, so
# that the shared machine's drift hits them alike; the figure per cell is the
# median over rounds of each job's median. Output: OUT/torch-raw.csv and
# OUT/torch.txt (the table, with the ratios the issue's bars name).
# env: FTCC_TORCH_RANKS (default "2 4"), FTCC_TORCH_SIZES (default "4K,1M,64M"),
#      FTCC_TORCH_ROUNDS (default 3), FTCC_TORCH_OUT (default bench-results)
set -eu
B=${1:?usage: scripts/bench-torch.sh BUILD_DIR}
B=$(cd "$B" && pwd)
RANKS=${FTCC_TORCH_RANKS:-2 4}
SIZES=${FTCC_TORCH_SIZES:-4K,1M,64M}
ROUNDS=${FTCC_TORCH_ROUNDS:-3}
OUT=${FTCC_TORCH_OUT:-bench-results}
PY=/usr/bin/python3
HERE=$(cd "$(dirname "$0")/.." && pwd)
ls "$B"/python/ftcc/_C*.so >/dev/null 2>&1 || { echo "bench-torch: make torch first" >&2; exit 1; }
mkdir -p "$OUT"
RAW=$OUT/torch-raw.csv
echo "round,impl,ranks,what,bytes,median_us" >"$RAW"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export PYTHONPATH="$B/python" FI_SHM_DISABLE_CMA=1
for r in $(seq 1 "$ROUNDS"); do
	for n in $RANKS; do
		for impl in gloo ftcc; do
			rm -f "$tmp/store"
			timeout 900 "$B/ftcc-run" -n "$n" "$PY" "$HERE/bench/torch_bench.py" "$impl" \
				"$tmp/store" "$SIZES" 100 2>/dev/null |
				sed -n "s/^\[0[.0-9]*\] \($impl,\)/$r,\1/p" >>"$RAW"
		done
		for s in $(echo "$SIZES" | tr , ' '); do
			rm -f "$tmp/c.csv"
			timeout 900 "$B/ftcc-run" -n "$n" "$B/ftbench" --min "$s" --max "$s" --in-place \
				--csv "$tmp/c.csv" --label c >/dev/null 2>&1
			# ftbench's row: impl,transport,ranks,bytes,median_us,...
			tail -n 1 "$tmp/c.csv" | awk -F, -v r="$r" -v n="$n" \
				'{ print r ",c," n ",allreduce," $4 "," $5 }' >>"$RAW"
		done
	done
	echo "bench-torch: round $r of $ROUNDS done" >&2
done
$PY - "$RAW" <<'PY' | tee "$OUT/torch.txt"
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1])))
cell = {}
for row in rows:
    cell.setdefault((row["impl"], int(row["ranks"]), row["what"], int(row["bytes"])), []).append(
        float(row["median_us"]))
med = {k: statistics.median(v) for k, v in cell.items()}
print("| what | ranks | bytes | gloo us | ftcc us | C ft_allreduce us | ftcc / gloo | ftcc / C |")
print("| --- | --- | --- | --- | --- | --- | --- | --- |")
for (impl, n, what, nbytes), v in sorted(med.items(), key=lambda kv: (kv[0][2], kv[0][1], kv[0][3])):
    if impl != "ftcc":
        continue
    g = med.get(("gloo", n, what, nbytes))
    c = med.get(("c", n, what, nbytes))
    print(f"| {what} | {n} | {nbytes} | {g:.1f} | {v:.1f} | {c if c is None else round(c, 1)} | "
          f"{v / g:.2f} | {'' if c is None else round(v / c, 2)} |")
PY
