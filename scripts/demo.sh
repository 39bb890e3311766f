#!/bin/sh
# SPDX-License-Identifier: MIT
# demo.sh BUILD_DIR: the main jobs: 4 ranks surviving a killed rank (shrink), the same rank restarted and rejoining exactly (rejoin), a checked allreduce.
set -eu
B=$1
echo "== 4 ranks train a linear model (gradients averaged with ft_allreduce, policy shrink);"
echo "== rank 2 is killed from outside (SIGKILL) midway: the survivors finish every step"
FTCC_POLICY=shrink "$B/ftcc-run" -n 4 --timeout 300 --kill 2@1.0 --ignore-killed \
	"$B/examples/train" 400 5
echo
echo "== exact rejoin (policy rejoin): 4 ranks train with random float32 gradients; first"
echo "== with nothing failing, then with rank 2 killed (SIGKILL) midway and restarted by"
echo "== ftcc-run --restart: it takes the model from a survivor, the interrupted step"
echo "== completes on every rank, and every rank ends with the failure-free model"
ref=$(mktemp) run=$(mktemp)
trap 'rm -f "$ref" "$run"' EXIT
FTCC_POLICY=rejoin "$B/ftcc-run" -n 4 --timeout 300 "$B/examples/train_rejoin" 150 262144 10 >"$ref"
FTCC_POLICY=rejoin FTCC_LOG_LEVEL=info "$B/ftcc-run" -n 4 --timeout 300 --restart --kill 2@1.2 \
	"$B/examples/train_rejoin" 150 262144 10 >"$run" 2>&1
grep -E "killing|restarted|rejoin|takes rank|replaying|state:|model" "$run" | grep -v " log: " || true
want=$(sed -n 's/^\[[0-9]*\] model //p' "$ref" | sort -u)
got=$(sed -n 's/^\[[0-9.]*\] model //p' "$run" | sort | uniq -c | awk '{print $2 " on " $1 " ranks"}')
echo "failure-free model digest: $want"
echo "with rank 2 killed and restarted: $got"
diff_ops=$(awk 'NR==FNR {if ($2 == "op") r[$3]=$5; next} $2 == "op" && r[$3] != $5' "$ref" "$run" | wc -l)
if [ "$(sed -n 's/^\[[0-9.]*\] model //p' "$run" | sort -u)" = "$want" ] &&
   [ "$(sed -n 's/^\[[0-9.]*\] model //p' "$run" | wc -l)" -eq 4 ] && [ "$diff_ops" -eq 0 ]; then
	echo "identical: every rank, every step, bit for bit"
else
	echo "DIFFERENT ($diff_ops op results differ)"; exit 1
fi
echo
echo "== 4 ranks allreduce 64 MiB of float32, result checked against a reference"
"$B/ftcc-run" -n 4 --timeout 300 "$B/examples/allreduce_check" 16777216 10
