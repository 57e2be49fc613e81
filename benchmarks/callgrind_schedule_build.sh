#!/bin/sh
# Instructions per action of build + lower + validate + simulate, counted by
# callgrind (repeatable on a noisy machine), for each policy at each size.
# usage: benchmarks/callgrind_schedule_build.sh BUILD_DIR
set -eu
bin="${1:-build}/benchmarks/bench_schedule_build"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
printf '%-12s %4s %5s %9s %14s %10s\n' policy S M actions instructions instr/act
for size in 8:64 32:256 64:1024; do
  for p in gpipe 1f1b 1f1b-comm bounded interleaved zb-h1; do
    out=$(valgrind --tool=callgrind --callgrind-out-file="$tmp/cg.out" \
          --toggle-collect=bench_case "$bin" --only "$p:$size" 2>/dev/null)
    n=$(printf '%s\n' "$out" | sed -n 's/.*: \([0-9]*\) actions/\1/p')
    ir=$(callgrind_annotate "$tmp/cg.out" 2>/dev/null | sed -n 's/^\([0-9,]*\) .*PROGRAM TOTALS.*/\1/p' | tr -d ,)
    printf '%-12s %4s %5s %9s %14s %10.1f\n' "$p" "${size%%:*}" "${size##*:}" "$n" "$ir" \
      "$(echo "$ir $n" | awk '{print $1/$2}')"
  done
done
