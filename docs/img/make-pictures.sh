#!/bin/sh
# Regenerate the schedule pictures of docs/schedules.md and README.md:
# every policy at S = 4, M = 8 with F = 1, B = 2, I = W = 1 (the defaults
# of `dpl schedule`), drawn by `dpl schedule --format svg`.
#   docs/img/make-pictures.sh [path/to/dpl]    (default: build/bindings/cli/dpl)
set -eu
dpl=${1:-build/bindings/cli/dpl}
out=$(dirname "$0")
pic() { # name, then the flags after --stages 4 --microbatches 8
	name=$1
	shift
	"$dpl" schedule --stages 4 --microbatches 8 "$@" --format svg \
		--out "$out/$name.svg"
}
pic gpipe --policy gpipe
pic 1f1b --policy 1f1b
pic 1f1b-comm --policy 1f1b-comm
pic bounded --policy bounded --cap 2
pic zb-h1 --policy zb-h1
pic zb-h2 --policy zb-h2
pic zb-auto --policy zb-auto --cap 4
pic interleaved --policy interleaved --chunks 2
pic looped-bfs --policy looped-bfs --chunks 2
pic interleaved-zb --policy interleaved-zb --chunks 2
pic zbv --policy zbv
pic dualpipev --policy dualpipev
