#!/usr/bin/env bash
# transport.sh - dpl's transports side by side with the native tools, on
# loopback only:
#   - every built module (inproc, shm, ucx over tcp and sm, ofi over
#     tcp;ofi_rxm and shm): ping-pong latency and bandwidth and streaming
#     bandwidth, 8 B .. 64 MiB, all through one probe (transport_probe.c,
#     the module loaded with dpl_transport_load) so every module is timed
#     by the same loop;
#   - ucx_perftest tag_lat and tag_bw with the same UCX_TLS;
#   - fi_pingpong (rdm, tagged) with the same provider;
#   - memcpy of the same sizes;
# then, in --reps rounds that interleave each module with its native tool
# at 8 B, 64 KiB, 1 MiB and 16 MiB (so a busy moment of this shared
# machine hits both sides), prints the medians' ratios against the
# targets:
#   ucx, ofi:  >= 0.9x the native tool's bandwidth at >= 64 KiB,
#              <= 1.2x its 8 B latency
#   shm:       at 1 MiB, at least UCX sm's tag_bw
# and writes everything as JSON (and TSV) into the output directory.
#
# usage: benchmarks/transport.sh [--build DIR] [--out DIR] [--reps N]
#                                [--quick] [--modules LIST] [--module-probes]
#                                [--no-pin]
#   --build DIR       dpl build directory (default: build)
#   --out DIR         results (default: DIR/bench-transport)
#   --reps N          runs per figure and side-by-side rounds; medians
#                     are kept (default 5)
#   --quick           sizes up to 1 MiB, 3 runs
#   --modules LIST    comma-separated subset of: inproc,shm,ucx-tcp,ucx-sm,
#                     ofi-tcp,ofi-shm (default: every one that is built)
#   --module-probes   also run the modules' own probes
#                     (build/.../bench_transport_<m>_probe) and show them
#   --no-pin          leave the two ranks where the scheduler puts them;
#                     by default (with 2 CPUs or more) rank 0 and the
#                     native tools' server run on the first CPU, rank 1
#                     and the clients on the second, for dpl and the
#                     tools alike: where two processes land changes large
#                     copies by up to 2x, and a run should not be decided
#                     by that
#
# A probe that runs past DPL_BENCH_PROBE_LIMIT seconds (default 600) is
# stopped and reported: a hang is a result too.
# Units: latencies are one-way (half a round trip) in microseconds;
# bandwidths are MiB/s. fi_pingpong prints decimal MB/s; it is converted.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
build=$root/build
out=
reps=5
max=64M
quick=0
modules=
module_probes=0
pin=1

die() { echo "transport.sh: $*" >&2; exit 2; }

while [ $# -gt 0 ]; do
  case $1 in
    --build) [ $# -ge 2 ] || die "--build needs a directory"; build=$(cd "$2" && pwd); shift 2 ;;
    --out) [ $# -ge 2 ] || die "--out needs a directory"; out=$2; shift 2 ;;
    --reps) [ $# -ge 2 ] || die "--reps needs a number"
            if ! [[ $2 =~ ^[0-9]+$ ]] || [ "$2" -lt 1 ] || [ "$2" -gt 15 ]; then
              die "--reps: '$2' is not 1..15"
            fi
            reps=$2; shift 2 ;;
    --quick) quick=1; shift ;;
    --modules) [ $# -ge 2 ] || die "--modules needs a list"; modules=$2; shift 2 ;;
    --module-probes) module_probes=1; shift ;;
    --no-pin) pin=0; shift ;;
    -h|--help) awk 'NR > 1 && /^#/ {sub(/^# ?/, ""); print; next} NR > 1 {exit}' "$0"; exit 0 ;;
    *) die "unknown argument '$1' (see --help)" ;;
  esac
done
if [ $quick = 1 ]; then max=1M; [ "$reps" = 5 ] && reps=3; fi
[ -f "$build/libsched/core/libdpl.so" ] || die "no libdpl.so in $build/libsched/core (build dpl first, or pass --build)"
out=${out:-$build/bench-transport}
mkdir -p "$out"
out=$(cd "$out" && pwd)
probe_limit=${DPL_BENCH_PROBE_LIMIT:-600}

# Pinning: the first two CPUs this script may use, one per side.
cpus=()
if [ $pin = 1 ]; then
  mapfile -t cpus < <(python3 -c 'import os; print(*sorted(os.sched_getaffinity(0)), sep="\n")' 2>/dev/null || true)
  if [ ${#cpus[@]} -lt 2 ] || ! command -v taskset >/dev/null; then
    echo "-- fewer than 2 CPUs (or no taskset): ranks not pinned"; pin=0
  fi
fi
# on SIDE CMD...: run CMD on side 0 (server, rank 0) or 1's CPU.
on() { local side=$1; shift; if [ $pin = 1 ]; then taskset -c "${cpus[$side]}" "$@"; else "$@"; fi; }
pin_opt=(); [ $pin = 1 ] && pin_opt=(--pin)

# ---------------------------------------------------------------------
# The probe (built with the benchmarks), and each built transport's
# shared module, which exports dpl_transport_plugin_v1.

probe=$build/benchmarks/bench_transport_probe
[ -x "$probe" ] || die "$probe is missing: build with -DDPL_BUILD_BENCHMARKS=ON"

# plugin NAME: the module's shared object, or nothing when it is not built
# (or built static, which dpl_transport_load cannot load).
plugin() {
  local so=$build/transports/$1/libdpl-transport-$1.so
  if [ -f "$so" ]; then echo "$so"; fi
}

# label|module|environment|ranks|probe options
# Streaming shares one send and one receive buffer among the requests in
# flight, as ucx_perftest does. The ping-pong posts each next receive as
# the native tool it is compared with does: right after its send
# (ucx_perftest's tag_lat; the default), or as soon as the last receive
# completed, before the send (fi_pingpong: --repost before).
configs=(
  "inproc|inproc||threads|"
  "shm|shm||processes|"
  "ucx-tcp|ucx|UCX_TLS=tcp UCX_NET_DEVICES=lo|processes|"
  "ucx-sm|ucx|UCX_TLS=sm UCX_NET_DEVICES=lo|processes|"
  "ofi-tcp|ofi|FI_PROVIDER=tcp;ofi_rxm FI_TCP_IFACE=lo|processes|--repost before"
  "ofi-shm|ofi|FI_PROVIDER=shm|processes|--repost before"
)

wanted() { [ -z "$modules" ] || [[ ",$modules," == *",$1,"* ]]; }

ran=()
for c in "${configs[@]}"; do
  IFS='|' read -r label mod envs ranks popts <<<"$c"
  wanted "$label" || continue
  so=$(plugin "$mod")
  if [ -z "$so" ]; then echo "-- $label: module not built, skipped"; continue; fi
  echo "== dpl $label"
  # shellcheck disable=SC2086
  if env $envs timeout "$probe_limit" "$probe" --transport "$so" --label "$label" \
       --ranks "$ranks" --max "$max" --reps "$reps" "${pin_opt[@]}" $popts \
       --tsv "$out/dpl_$label.tsv" --json "$out/dpl_$label.json"; then
    ran+=("$label")
  else
    echo "-- $label: the probe failed or ran past ${probe_limit} s (a hang is a result too)"
  fi
done

echo "== memcpy"
"$probe" --memcpy --max "$max" --reps "$reps" \
  --tsv "$out/memcpy.tsv" --json "$out/memcpy.json"

# ---------------------------------------------------------------------
# Native tools.

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])' 2>/dev/null \
    || echo $((20000 + RANDOM % 20000))
}

median() { sort -g | awk 'NF {v[++n] = $1} END {if (n == 0) {print "nan"; exit}
  print (n % 2) ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2}'; }

# perftest TLS TEST SIZE ITERS -> "p50_us bw_mib_s" (one run)
perftest() {
  local tls=$1 test=$2 size=$3 iters=$4 port srv line
  port=$(free_port)
  on 0 env UCX_TLS="$tls" UCX_NET_DEVICES=lo ucx_perftest -p "$port" >/dev/null 2>&1 &
  srv=$!
  sleep 0.3
  line=$(on 1 env UCX_TLS="$tls" UCX_NET_DEVICES=lo timeout 120 ucx_perftest 127.0.0.1 -p "$port" \
           -t "$test" -s "$size" -n "$iters" -w $((iters / 10 + 1)) -f 2>/dev/null \
         | awk '$1 ~ /^[0-9]+$/ && NF >= 8 {l = $0} END {print l}') || true
  kill "$srv" 2>/dev/null || true
  wait "$srv" 2>/dev/null || true
  # columns: iterations p50 avg overall bw_avg bw_overall rate_avg rate_overall
  [ -n "$line" ] && awk '{print $2, $6}' <<<"$line"
}

# pingpong PROVIDER SIZE ITERS -> "usec_per_xfer mib_s" (one run)
pingpong() {
  local prov=$1 size=$2 iters=$3 port srv line dom=()
  [ "$prov" = shm ] || dom=(-d lo)
  port=$(free_port)
  on 0 timeout 120 fi_pingpong -B "$port" -p "$prov" -e rdm -m tagged -I "$iters" -S "$size" "${dom[@]}" \
    >/dev/null 2>&1 &
  srv=$!
  sleep 0.5
  line=$(on 1 timeout 120 fi_pingpong -P "$port" -p "$prov" -e rdm -m tagged -I "$iters" -S "$size" \
           "${dom[@]}" 127.0.0.1 2>/dev/null | awk 'NF == 8 && $1 != "bytes" {l = $0} END {print l}') || true
  wait "$srv" 2>/dev/null || true
  # columns: bytes #sent #ack total time MB/sec usec/xfer Mxfers/sec
  [ -n "$line" ] && awk '{printf "%s %.3f\n", $7, $6 * 1e6 / 1048576}' <<<"$line"
}

# The ratios come from rounds that interleave dpl and the native tool at
# the compared sizes (so a busy moment of the machine hits both), and
# keep the median of each figure over the rounds.
sizes_cmp=(8 65536 1048576)
[ $quick = 1 ] || sizes_cmp+=(16777216)
cmp_list=$(IFS=,; echo "${sizes_cmp[*]}")
iters_for() { local s=$1; if [ "$s" -le 4096 ]; then echo 20000; elif [ "$s" -le 1048576 ]; then echo 2000; else echo 200; fi; }
have() { [[ " ${ran[*]:-} " == *" $1 "* ]]; }
conf_of() { local c; for c in "${configs[@]}"; do [[ $c == "$1|"* ]] && echo "$c"; done; }

# dpl_round LABEL ROUND: the probe at the compared sizes, once.
dpl_round() {
  local label mod envs ranks popts
  IFS='|' read -r label mod envs ranks popts <<<"$(conf_of "$1")"
  # shellcheck disable=SC2086
  env $envs timeout "$probe_limit" "$probe" --transport "$(plugin "$mod")" \
    --label "$label" --ranks "$ranks" --sizes "$cmp_list" --reps 1 "${pin_opt[@]}" $popts \
    --tsv "$out/cmp_${label}_$2.tsv" >/dev/null \
    || echo "-- $label: the probe failed in round $2"
}

native=$out/native.tsv
: >"$native"
ucx_ok=0; fi_ok=0
command -v ucx_perftest >/dev/null && ucx_ok=1 || echo "-- ucx_perftest not found (apt-get install ucx-utils)"
command -v fi_pingpong >/dev/null && fi_ok=1 || echo "-- fi_pingpong not found (apt-get install libfabric-bin)"
for ((round = 1; round <= reps; round++)); do
  echo "== side-by-side round $round of $reps"
  for tls in tcp sm; do
    have "ucx-$tls" || { [ $tls = sm ] && have shm; } || continue
    have "ucx-$tls" && dpl_round "ucx-$tls" "$round"
    [ $tls = sm ] && have shm && dpl_round shm "$round"
    [ $ucx_ok = 1 ] || continue
    for s in "${sizes_cmp[@]}"; do
      n=$(iters_for "$s"); p50=; b=
      read -r p50 _ < <(perftest "$tls" tag_lat "$s" "$n") || true
      [ "$s" -ge 65536 ] && { read -r _ b < <(perftest "$tls" tag_bw "$s" "$n") || true; }
      printf 'ucx_perftest-%s\t%s\t%s\t%s\t%s\n' "$tls" "$s" "${p50:-nan}" "${b:-nan}" "$round" >>"$native"
    done
  done
  for prov in "tcp;ofi_rxm" shm; do
    label=ofi-${prov%%;*}
    have "$label" || continue
    dpl_round "$label" "$round"
    [ $fi_ok = 1 ] || continue
    for s in "${sizes_cmp[@]}"; do
      n=$(iters_for "$s"); [ "$n" -gt 2000 ] && n=2000; u=; b=
      read -r u b < <(pingpong "$prov" "$s" "$n") || true
      printf 'fi_pingpong-%s\t%s\t%s\t%s\t%s\n' "${prov%%;*}" "$s" "${u:-nan}" "${b:-nan}" "$round" >>"$native"
    done
  done
done

if [ $module_probes = 1 ]; then
  for p in "$build"/transports/*/bench_transport_*_probe "$build"/benchmarks/bench_transport_*_probe; do
    [ -x "$p" ] || continue
    echo "== $(basename "$p") (the module's own probe)"
    (cd "$out" && "$p") || echo "-- $(basename "$p") failed"
  done
fi

# ---------------------------------------------------------------------
# Ratios.

# dpl LABEL KIND BYTES COLUMN: median over the rounds
# (pingpong: 3 p50 us, 4 mean us, 5 MiB/s; stream: 3 MiB/s)
dpl() {
  local f v=()
  for f in "$out"/cmp_"$1"_*.tsv; do
    [ -f "$f" ] || continue
    v+=("$(awk -v k="$2" -v b="$3" -v c="$4" '$1 == k && $2 == b {print $c}' "$f")")
  done
  ((${#v[@]})) && printf '%s\n' "${v[@]}" | grep -v nan | median
}
# nat TOOL BYTES COLUMN (3 latency, 4 bandwidth): median over the rounds
nat() { awk -v t="$1" -v b="$2" -v c="$3" '$1 == t && $2 == b && $c != "nan" {print $c}' "$native" | median; }
# sweep LABEL KIND BYTES COLUMN: the full sweep's figure
sweep() {
  if [ -f "$out/dpl_$1.tsv" ]; then
    awk -v k="$2" -v b="$3" -v c="$4" '$1 == k && $2 == b {print $c}' "$out/dpl_$1.tsv"
  fi
}
ratio() { awk -v a="${1:-nan}" -v b="${2:-nan}" 'BEGIN {if (a == "nan" || b == "nan" || a == "" || b == "" || b + 0 == 0) print "n/a"; else printf "%.2f", a / b}'; }
verdict() { awk -v r="$1" -v t="$2" -v op="$3" 'BEGIN {if (r == "n/a") print "-"; else if ((op == ">=" && r + 0 >= t) || (op == "<=" && r + 0 <= t)) print "ok"; else print "MISS"}'; }

summary=$out/summary.tsv
: >"$summary"
row() { printf '%-9s %-28s %12s %12s %7s %-8s %s\n' "$@"; printf '%s\t' "$@" >>"$summary"; echo >>"$summary"; }

echo
echo "== dpl vs native tools, medians of $reps interleaved rounds (one-way us; MiB/s)"
row module measure dpl native ratio target verdict
for tls in tcp sm; do
  lbl=ucx-$tls
  have "$lbl" || continue
  a=$(dpl "$lbl" pingpong 8 3); b=$(nat "ucx_perftest-$tls" 8 3); r=$(ratio "$a" "$b")
  row "$lbl" "8 B latency vs tag_lat" "${a:-n/a}" "${b:-n/a}" "$r" "<= 1.2" "$(verdict "$r" 1.2 '<=')"
  for s in "${sizes_cmp[@]}"; do
    [ "$s" -ge 65536 ] || continue
    a=$(dpl "$lbl" stream "$s" 3); b=$(nat "ucx_perftest-$tls" "$s" 4); r=$(ratio "$a" "$b")
    row "$lbl" "$s B stream vs tag_bw" "${a:-n/a}" "${b:-n/a}" "$r" ">= 0.9" "$(verdict "$r" 0.9 '>=')"
  done
done
for prov in tcp shm; do
  lbl=ofi-$prov
  have "$lbl" || continue
  a=$(dpl "$lbl" pingpong 8 4); b=$(nat "fi_pingpong-$prov" 8 3); r=$(ratio "$a" "$b")
  row "$lbl" "8 B latency vs fi_pingpong" "${a:-n/a}" "${b:-n/a}" "$r" "<= 1.2" "$(verdict "$r" 1.2 '<=')"
  for s in "${sizes_cmp[@]}"; do
    [ "$s" -ge 65536 ] || continue
    a=$(dpl "$lbl" pingpong "$s" 5); b=$(nat "fi_pingpong-$prov" "$s" 4); r=$(ratio "$a" "$b")
    row "$lbl" "$s B pingpong vs fi_pingpong" "${a:-n/a}" "${b:-n/a}" "$r" ">= 0.9" "$(verdict "$r" 0.9 '>=')"
  done
done
if have shm; then
  a=$(dpl shm stream 1048576 3); b=$(nat ucx_perftest-sm 1048576 4); r=$(ratio "$a" "$b")
  row shm "1 MiB stream vs UCX sm tag_bw" "${a:-n/a}" "${b:-n/a}" "$r" ">= 1.0" "$(verdict "$r" 1.0 '>=')"
fi
echo
echo "== dpl streaming vs memcpy of the same size (MiB/s)"
printf '%-9s %10s %12s %12s %7s\n' module bytes dpl memcpy ratio
for lbl in "${ran[@]}"; do
  for s in 65536 1048576 16777216; do
    a=$(sweep "$lbl" stream "$s" 3); b=$(awk -v b="$s" '$2 == b {print $3}' "$out/memcpy.tsv")
    [ -n "$a" ] || continue
    printf '%-9s %10s %12s %12s %7s\n' "$lbl" "$s" "$a" "${b:-n/a}" "$(ratio "$a" "$b")"
  done
done

# One JSON file with everything.
{
  echo "{"
  echo "  \"host\": \"$(uname -n)\", \"date\": \"$(date -u +%FT%TZ)\", \"reps\": $reps, \"max\": \"$max\","
  echo "  \"dpl\": {"
  first=1
  for lbl in "${ran[@]}"; do
    [ $first = 1 ] || echo ","
    first=0
    printf '    "%s": ' "$lbl"; cat "$out/dpl_$lbl.json"
  done
  echo "  },"
  printf '  "memcpy": '; cat "$out/memcpy.json"; echo ","
  echo "  \"native\": ["
  awk -F'\t' 'BEGIN {n = 0} {printf "%s    {\"tool\": \"%s\", \"bytes\": %s, \"latency_us\": \"%s\", \"mib_s\": \"%s\", \"round\": %s}", (n++ ? ",\n" : ""), $1, $2, $3, $4, $5} END {print ""}' "$native"
  echo "  ],"
  echo "  \"ratios\": ["
  awk -F'\t' 'BEGIN {n = 0} {printf "%s    {\"module\": \"%s\", \"measure\": \"%s\", \"dpl\": \"%s\", \"native\": \"%s\", \"ratio\": \"%s\", \"target\": \"%s\", \"verdict\": \"%s\"}", (n++ ? ",\n" : ""), $1, $2, $3, $4, $5, $6, $7} END {print ""}' "$summary"
  echo "  ]"
  echo "}"
} >"$out/transport.json"
echo
echo "wrote $out/transport.json"
