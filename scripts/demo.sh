#!/bin/sh
# demo.sh BUILD_DIR: the main job: 4 ranks under ftcc-run training data-parallel, then a checked, timed allreduce.
set -eu
B=$1
echo "== 4 ranks train a linear model (gradients averaged with ft_allreduce, policy shrink);"
echo "== rank 2 is killed from outside (SIGKILL) midway: the survivors finish every step"
FTCC_POLICY=shrink "$B/ftcc-run" -n 4 --timeout 300 --kill 2@1.0 --ignore-killed \
	"$B/examples/train" 400 5
echo
echo "== 4 ranks allreduce 64 MiB of float32, result checked against a reference"
"$B/ftcc-run" -n 4 --timeout 300 "$B/examples/allreduce_check" 16777216 10
