#!/bin/sh
# Instructions per action of dpl_runner_step() (runner, in-process
# transport, no-op callbacks), counted by callgrind for each size of
# bench_runner_overhead, twice over:
#  - busy: waits left out (the inclusive count of the runner's wait loop,
#    dpl__wait_for (wait_for before the split), taken off the total): the runner's own work per action,
#    the same from run to run;
#  - all: waits included. Under valgrind the rank threads take turns, so
#    a wait is a few polls and a yield, and how many varies a little from
#    run to run.
# usage: benchmarks/callgrind_runner_overhead.sh BUILD_DIR
set -eu
bin="${1:-build}/benchmarks/bench_runner_overhead"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
printf '%4s %6s %9s %14s %12s %12s\n' S M actions instructions busy/act all/act
for S in ${SIZES_S:-4 8 16}; do
  for M in ${SIZES_M:-64 256 1024}; do
    out=$(valgrind --tool=callgrind --callgrind-out-file="$tmp/cg.out" \
          --toggle-collect=dpl_runner_step "$bin" --only "$S:$M" 2>/dev/null)
    n=$(printf '%s\n' "$out" | sed -n 's/.*: \([0-9]*\) actions.*/\1/p')
    ir=$(callgrind_annotate "$tmp/cg.out" 2>/dev/null | sed -n 's/^\([0-9,]*\) .*PROGRAM TOTALS.*/\1/p' | tr -d ,)
    wait=$(callgrind_annotate --inclusive=yes "$tmp/cg.out" 2>/dev/null |
           sed -n 's/^ *\([0-9,]*\) .*:\(dpl__\)\{0,1\}wait_for \[.*/\1/p' | head -n 1 | tr -d ,)
    printf '%4s %6s %9s %14s %12.1f %12.1f\n' "$S" "$M" "$n" "$ir" \
      "$(echo "$ir ${wait:-0} $n" | awk '{print ($1-$2)/$3}')" \
      "$(echo "$ir $n" | awk '{print $1/$2}')"
  done
done
