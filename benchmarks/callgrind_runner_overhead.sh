#!/bin/sh
# Instructions per action of dpl_runner_step() (runner, in-process
# transport, no-op callbacks; waits included: under valgrind the rank
# threads take turns, so a wait is a few polls and a yield), counted by
# callgrind for each size of bench_runner_overhead.
# usage: benchmarks/callgrind_runner_overhead.sh BUILD_DIR
set -eu
bin="${1:-build}/benchmarks/bench_runner_overhead"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
printf '%4s %6s %9s %14s %10s\n' S M actions instructions instr/act
for S in ${SIZES_S:-4 8 16}; do
  for M in ${SIZES_M:-64 256 1024}; do
    out=$(valgrind --tool=callgrind --callgrind-out-file="$tmp/cg.out" \
          --toggle-collect=dpl_runner_step "$bin" --only "$S:$M" 2>/dev/null)
    n=$(printf '%s\n' "$out" | sed -n 's/.*: \([0-9]*\) actions.*/\1/p')
    ir=$(callgrind_annotate "$tmp/cg.out" 2>/dev/null | sed -n 's/^\([0-9,]*\) .*PROGRAM TOTALS.*/\1/p' | tr -d ,)
    printf '%4s %6s %9s %14s %10.1f\n' "$S" "$M" "$n" "$ir" \
      "$(echo "$ir $n" | awk '{print $1/$2}')"
  done
done
