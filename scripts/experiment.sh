#!/bin/sh
# SPDX-License-Identifier: MIT
# experiment.sh BUILD_DIR: the recovery experiment (Fashion-MNIST MLR and MLP, synthetic MF; 4 ranks, outside SIGKILLs): BUILD_DIR/experiment/results.md and PNG plots.
# EXPERIMENT_FULL=1: 10 seeds and 400 steps (the quick default: 5 seeds, 220 steps, about 10 minutes).
# EXPERIMENT_MODELS=mlr,mlp, EXPERIMENT_CELLS=name,..., EXPERIMENT_SEEDS=1,2,... narrow a run;
# EXPERIMENT_OUT=DIR writes elsewhere; EXPERIMENT_ANALYSE_ONLY=1 redoes tables and plots from DIR/raw.json.
set -eu
B=$1
OUT=${EXPERIMENT_OUT:-$B/experiment}
mkdir -p "$OUT"
[ -n "${EXPERIMENT_ANALYSE_ONLY:-}" ] || rm -rf "$OUT/runs"
python3 "$(dirname "$0")/experiment.py" "$B" "$OUT"
for m in mlr mlp mf; do
	[ -f "$OUT/plot/$m-curves.dat" ] || continue
	names=$(cat "$OUT/plot/$m-names.txt")
	kill=$(cat "$OUT/plot/$m-kill.txt")
	n=$(echo "$names" | wc -w)
	gnuplot <<GP
set terminal pngcairo size 1000,700 font ",10"
set output "$OUT/$m-loss.png"
set multiplot layout 2,1 title "$m: training loss around the kill (seed 1, rank 1 killed after update $kill)"
set xrange [$kill-30:$kill+100]
set arrow from $kill, graph 0 to $kill, graph 1 nohead dt 2
set ylabel "loss (fixed train subset)"
set key outside right
names = "$names"
plot for [i=0:$n-1] "$OUT/plot/$m-curves.dat" index i using 1:2 with lines lw 1.5 dt 1+i/8 title word(names, i+1)
set ylabel "loss - failure-free loss"
plot for [i=0:$n-1] "$OUT/plot/$m-curves.dat" index i using 1:3 with lines lw 1.5 dt 1+i/8 title word(names, i+1)
unset multiplot
set output "$OUT/$m-cost.png"
unset arrow
set xrange [*:*]
set title "$m: iteration cost by recovery strategy (mean ± sd over seeds)"
set ylabel "iteration cost (iterations)"
set style fill solid 0.6
set boxwidth 0.6
set xtics rotate by -30
set yrange [0:*]
set xrange [-0.6:$(wc -l < "$OUT/plot/$m-cost.dat")-0.4]
unset key
plot "$OUT/plot/$m-cost.dat" using 0:2:3:xtic(1) with boxerrorbars lc rgb "#4477aa"
GP
done
echo "experiment: $OUT/results.md, $(ls "$OUT"/*.png 2>/dev/null | tr '\n' ' ')"
