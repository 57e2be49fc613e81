#!/usr/bin/env bash
# compare_ucx_sm.sh - the shm transport next to UCX's shared-memory
# transports (UCX_TLS=sm: sysv + cma), run one after the other on this
# host, each N times; prints medians and ratios and writes JSON.
#
# usage: transports/shm/compare_ucx_sm.sh BUILD_DIR [N] [OUT.json]
#
# Figures: one-way latency of an 8-byte ping-pong (ucx_perftest tag_lat,
# 50th percentile; the probe's median round trip / 2) and streaming
# bandwidth of 1 MiB messages (ucx_perftest tag_bw "overall" MiB/s; the
# probe's overall MiB/s with 32 messages in flight).
set -euo pipefail
build=${1:?usage: $0 BUILD_DIR [N] [OUT.json]}
n=${2:-3}
out=${3:-compare_ucx_sm.json}
probe=$build/transports/shm/bench_transport_shm_probe
command -v ucx_perftest >/dev/null || { echo "ucx_perftest not found (apt-get install ucx-utils)"; exit 2; }
[ -x "$probe" ] || { echo "$probe not built"; exit 2; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

export UCX_TLS=sm UCX_NET_DEVICES=lo

# ucx_perftest TEST SIZE ITERS WARMUP -> its last result line
perftest() {
  local port=$((20000 + RANDOM % 20000))
  timeout 120 ucx_perftest -p "$port" >/dev/null 2>&1 &
  local srv=$!
  sleep 0.5
  timeout 120 ucx_perftest 127.0.0.1 -p "$port" -t "$1" -s "$2" -n "$3" -w "$4" -f 2>/dev/null |
    awk 'NF == 8 && $1 ~ /^[0-9]+$/ {line = $0} END {print line}'
  wait "$srv" || true
}

median() { sort -g | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }

for i in $(seq "$n"); do
  "$probe" --reps 1 --json "$tmp/probe$i.json" >/dev/null
  awk -F'[:,}]' '/"bytes": 8,/ {print $4}' "$tmp/probe$i.json" >>"$tmp/dpl_lat"
  awk -F'[:,}]' '/"bytes": 1048576, "overall/ {print $4}' "$tmp/probe$i.json" >>"$tmp/dpl_bw"
  perftest tag_lat 8 20000 2000 | awk '{print $2}' >>"$tmp/ucx_lat"
  perftest tag_bw 1048576 2000 200 | awk '{print $6}' >>"$tmp/ucx_bw"
done

dl=$(median <"$tmp/dpl_lat"); ul=$(median <"$tmp/ucx_lat")
db=$(median <"$tmp/dpl_bw"); ub=$(median <"$tmp/ucx_bw")
printf '%-28s %12s %12s %8s\n' "median of $n" "dpl shm" "UCX sm" "ratio"
printf '%-28s %12.3f %12.3f %8.2f\n' "8 B one-way latency (us)" "$dl" "$ul" "$(echo "$dl / $ul" | bc -l)"
printf '%-28s %12.0f %12.0f %8.2f\n' "1 MiB streaming (MiB/s)" "$db" "$ub" "$(echo "$db / $ub" | bc -l)"
cat >"$out" <<EOF
{"runs": $n, "dpl_shm": {"lat8_us": $dl, "bw1m_mib_s": $db},
 "ucx_sm": {"lat8_us": $ul, "bw1m_mib_s": $ub}}
EOF
echo "wrote $out"
