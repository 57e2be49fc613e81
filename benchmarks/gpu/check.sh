#!/bin/bash
# check.sh - dpl's GPU check: one command that, on a machine with a GPU,
# configures and builds dpl with CUDA, runs the CUDA tests and
# batteries, `dpl train --device cuda --check` on several layouts and the
# GPU benchmarks, and writes one JSON and one table.
#
#   benchmarks/gpu/check.sh [--out DIR] [--build DIR] [--debs DIR]
#                           [--budget SECONDS]
#
#   --out DIR     where check.json, check.md and the logs go
#                 (default: BUILD/gpu-check)
#   --build DIR   the build folder (default: build-gpu-check in the tree)
#   --debs DIR    Debian package files to unpack when Criterion, cJSON,
#                 OpenBLAS, OpenSSL's headers or pkg-config are missing
#                 (default: benchmarks/gpu/debs, made by fetch-debs.sh)
#   --budget S    seconds for the whole check (default 450): each step
#                 gets what is left, and steps that no longer fit are
#                 skipped, saying so
#
# Exit status: 0 every step that ran passed; 1 a step failed; 77 no GPU
# here (nothing was built: the JSON says why); 2 bad flags.
# Every step is bounded by `timeout`; what was skipped, and why, is in the
# table and the JSON.
set -u
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
build=$repo/build-gpu-check
out=
debs=$here/debs
budget=450
while [ $# -gt 0 ]; do
  case $1 in
    --out) out=${2:?--out needs a folder}; shift 2 ;;
    --build) build=${2:?--build needs a folder}; shift 2 ;;
    --debs) debs=${2:?--debs needs a folder}; shift 2 ;;
    --budget) budget=${2:?--budget needs seconds}; shift 2 ;;
    -h|--help) sed -n '2,24p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "check.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
case $budget in ''|*[!0-9]*) echo "check.sh: --budget '$budget' is not a number of seconds" >&2; exit 2 ;; esac
[ -n "$out" ] || out=$build/gpu-check
mkdir -p "$out" || exit 2
steps=$out/steps.tsv
: >"$steps"
t0=$(date +%s)
failed=0

# record NAME STATUS SECONDS DETAIL: one line of the table.
record() {
  printf '%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$(printf '%s' "$4" | tr '\t\n' '  ' | cut -c1-300)" >>"$steps"
  printf 'check: %-34s %-7s %4ss  %s\n' "$1" "$2" "$3" "$4"
  [ "$2" = failed ] && failed=1
  return 0
}
left() { echo $(( budget - ($(date +%s) - t0) )); }

# step NAME LIMIT CMD...: run CMD with stdout and stderr in NAME.log,
# bounded by LIMIT seconds or what is left of the budget; passed when it
# exits 0, failed otherwise (or skipped when nothing is left). The last
# line of its output is the detail.
step() {
  local name=$1 limit=$2 l s rc
  shift 2
  l=$(left)
  if [ "$l" -lt 15 ]; then
    record "$name" skipped 0 "the budget of ${budget} s is spent"
    return 1
  fi
  [ "$limit" -gt "$l" ] && limit=$l
  s=$(date +%s)
  timeout -k 5 "$limit" "$@" >"$out/$name.log" 2>&1
  rc=$?
  local d
  d=$(grep -v '^\s*$' "$out/$name.log" | tail -n 1)
  if [ $rc -eq 0 ]; then
    record "$name" passed $(( $(date +%s) - s )) "$d"
  elif [ $rc -eq 124 ] || [ $rc -eq 137 ]; then
    record "$name" failed $(( $(date +%s) - s )) "timed out after ${limit} s: $d"
  elif [ $rc -eq 77 ]; then
    record "$name" skipped $(( $(date +%s) - s )) "$d"
  else
    record "$name" failed $(( $(date +%s) - s )) "exit $rc: $d"
  fi
  return $rc
}

# finish: the JSON and the table from steps.tsv, then exit.
finish() {
  local code=$1
  python3 - "$steps" "$out" "$code" <<'EOF'
import json, os, sys
steps, out, code = sys.argv[1], sys.argv[2], int(sys.argv[3])
rows = [l.rstrip("\n").split("\t") for l in open(steps) if l.strip()]
res = {"exit": code, "steps": [], "benchmarks": {}}
for name in ("gpu", "started"):
    p = os.path.join(out, name + ".txt")
    if os.path.exists(p):
        res[name] = open(p).read().strip()
for r in rows:
    res["steps"].append({"name": r[0], "status": r[1], "seconds": int(r[2]),
                         "detail": r[3] if len(r) > 3 else ""})
for f in sorted(os.listdir(out)):
    if f.startswith("bench_") and f.endswith(".json"):
        try:
            res["benchmarks"][f[6:-5]] = json.load(open(os.path.join(out, f)))
        except ValueError as e:
            res["benchmarks"][f[6:-5]] = {"error": str(e)}
with open(os.path.join(out, "check.json.tmp"), "w") as f:
    json.dump(res, f, indent=1)
os.replace(os.path.join(out, "check.json.tmp"), os.path.join(out, "check.json"))
md = ["| step | status | s | detail |", "|---|---|---|---|"]
md += ["| %s | %s | %s | %s |" % (r[0], r[1], r[2],
       (r[3] if len(r) > 3 else "").replace("|", "/")) for r in rows]
open(os.path.join(out, "check.md"), "w").write("\n".join(md) + "\n")
print("\n".join(md))
print("check: %s and %s" % (os.path.join(out, "check.json"),
                            os.path.join(out, "check.md")))
EOF
  exit "$code"
}

date -u +%Y-%m-%dT%H:%M:%SZ >"$out/started.txt"

# ---- 1. Is there a GPU? ---------------------------------------------
gpu=
if command -v nvidia-smi >/dev/null 2>&1; then
  gpu=$(timeout 30 nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null | head -n 1)
fi
# DPL_GPU_CHECK_FORCE=1 goes on without one: to try the script's own
# steps (unpacking, building, the table) on a machine without a GPU,
# where every GPU step then fails or skips, naming the CUDA error.
if [ -z "$gpu" ] && [ "${DPL_GPU_CHECK_FORCE:-0}" = 1 ]; then
  gpu="none (DPL_GPU_CHECK_FORCE=1: going on without one)"
fi
if [ -z "$gpu" ]; then
  why="no GPU on this machine"
  command -v nvidia-smi >/dev/null 2>&1 && why="$why (nvidia-smi lists none)" || why="$why (no nvidia-smi)"
  echo "none: $why" >"$out/gpu.txt"
  record gpu skipped 0 "$why: nothing to check"
  finish 77
fi
echo "$gpu" >"$out/gpu.txt"
record gpu passed 0 "$gpu"

# ---- 2. Build dependencies: the machine's, or the unpacked packages --
pc=$(command -v pkg-config || command -v pkgconf || true)
have() { [ -n "$pc" ] && "$pc" --exists "$@" 2>/dev/null; }
root=$build/deps
cmake_extra=()
if ! have criterion libcjson openblas && ls "$debs"/*.deb >/dev/null 2>&1; then
  rm -rf "$root" && mkdir -p "$root"
  for f in "$debs"/*.deb; do
    if command -v dpkg-deb >/dev/null 2>&1; then
      dpkg-deb -x "$f" "$root"
    else
      # A .deb is an ar archive; its files are in data.tar.*.
      (cd "$root" && d=$(ar t "$f" | grep '^data\.tar') && ar p "$f" "$d" | tar -x -a -f - 2>/dev/null ||
        ar p "$f" "$d" | tar -x --zstd -f - 2>/dev/null || ar p "$f" "$d" | tar -x -J -f -)
    fi
  done
  # The .pc files name /usr: point them at the unpacked tree; Criterion's
  # private requirements only matter for static links.
  find "$root" -name '*.pc' -print0 | xargs -0 -r sed -i \
    -e "s|^\([a-z_]*\)=/usr|\1=$root/usr|" -e '/^Requires.private:/d' -e '/^Libs.private:/d'
  ma=x86_64-linux-gnu
  export PKG_CONFIG_PATH=$root/usr/lib/$ma/pkgconfig:$root/usr/lib/$ma/openblas-pthread/pkgconfig:$root/usr/share/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}
  export LD_LIBRARY_PATH=$root/usr/lib/$ma:$root/usr/lib/$ma/openblas-pthread${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  [ -z "$pc" ] && [ -x "$root/usr/bin/pkgconf" ] && pc=$root/usr/bin/pkgconf
  cmake_extra+=("-DOPENSSL_ROOT_DIR=$root/usr")
  record deps passed 0 "unpacked $(ls "$debs"/*.deb | wc -l) package files from $debs"
else
  have criterion libcjson openblas && record deps passed 0 "the machine's own (pkg-config finds criterion, libcjson, openblas)" ||
    record deps skipped 0 "no Criterion, cJSON or OpenBLAS and no package files in $debs (run fetch-debs.sh where apt works): the tests, the CLI and the CPU model are not built"
fi
[ -n "$pc" ] && cmake_extra+=("-DPKG_CONFIG_EXECUTABLE=$pc")
tests=OFF; have criterion && tests=ON
json=OFF; have libcjson && json=ON
cpu=OFF; have openblas && cpu=ON

# ---- 3. Configure and build with CUDA (sm_90 only, to be quick) ------
gen=(); command -v ninja >/dev/null 2>&1 && gen=(-G Ninja)
step configure 120 cmake -S "$repo" -B "$build" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release \
  -DDPL_WITH_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DDPL_WITH_UCX=OFF -DDPL_WITH_OFI=OFF \
  -DDPL_WITH_MPI=OFF -DDPL_BUILD_TESTS=$tests -DDPL_WITH_JSON=$json -DDPL_WITH_CPU=$cpu \
  -DDPL_BUILD_BENCHMARKS=ON "${cmake_extra[@]}" || finish 1
step build 240 cmake --build "$build" -j "$(nproc)" || finish 1
dpl=$build/bindings/cli/dpl
bench=$build/benchmarks

# ---- 4. The platform: CUDA IPC allowed? -----------------------------
step ipc_probe 40 "$bench/gpu/bench_gpu_ipc_probe"
ipc=$?

# ---- 5. The CUDA tests and batteries (CTest) ------------------------
if [ "$tests" = ON ]; then
  step ctest_cuda 200 ctest --test-dir "$build" -j 4 --output-on-failure \
    -R 'cuda|cudaipc|nccl'
  # One line per CUDA test, so the table shows each.
  grep -E 'Test +#[0-9]+: ' "$out/ctest_cuda.log" | sed -E 's/.*Test +#[0-9]+: ([^ ]+) [ .*]*([A-Za-z]+).*/\1 \2/' |
    while read -r t st; do
      case $st in Passed) s=passed ;; Skipped|Not) s=skipped ;; *) s=failed ;; esac
      record "  $t" "$s" 0 "ctest: $st"
    done
else
  record ctest_cuda skipped 0 "built without Criterion: no tests"
fi

# ---- 6. dpl train --device cuda --check -----------------------------
if [ -x "$dpl" ]; then
  step train_1gpu_f64 60 "$dpl" train --device cuda --stages 1 --check --json
  step train_1gpu_f32 60 "$dpl" train --device cuda --stages 1 --dtype f32 --iterations 5 --check --json
  if [ -e "$build/transports/cudaipc" ] && [ $ipc -eq 0 ]; then
    step train_1f1b 90 "$dpl" train --device cuda --transport cudaipc --nprocs 4 --policy 1f1b --check --json
    step train_zbh1 90 "$dpl" train --device cuda --transport cudaipc --nprocs 4 --policy zb-h1 --check --json
    step train_replicated 90 "$dpl" train --device cuda --transport cudaipc --stages 3 --replicas 2,1,1 --nprocs 4 --check --json
  else
    why="the cudaipc transport is not built"
    [ $ipc -eq 1 ] && why="the platform refuses CUDA IPC ($(tail -n 1 "$out/ipc_probe.log"))"
    [ $ipc -gt 1 ] && why="the CUDA IPC probe failed ($(tail -n 1 "$out/ipc_probe.log"))"
    for s in train_1f1b train_zbh1 train_replicated; do record $s skipped 0 "$why"; done
  fi
else
  record train skipped 0 "built without cJSON: no dpl command"
fi

# ---- 7. Benchmarks --------------------------------------------------
step bench_copy 60 "$bench/gpu/bench_gpu_copy" --json "$out/bench_copy.json"
step bench_runner 60 "$bench/gpu/bench_gpu_runner" --json "$out/bench_runner.json"
if [ -x "$bench/gpu/bench_gpu_gemm" ]; then
  step bench_gemm 60 "$bench/gpu/bench_gpu_gemm" --json "$out/bench_gemm.json"
else
  record bench_gemm skipped 0 "bench_gpu_gemm is not built (no GPU model: built without the CPU model or cuBLAS)"
fi
if [ -e "$build/transports/cudaipc" ] && [ $ipc -eq 0 ] && [ -x "$bench/bench_transport_probe" ]; then
  mod=$(ls "$build"/transports/cudaipc/libdpl-transport-cudaipc.so 2>/dev/null | head -n 1)
  step bench_cudaipc 120 "$bench/bench_transport_probe" --transport "$mod" --mem cuda \
    --sizes 8,1048576,4194304,16777216,67108864,268435456 --reps 3 --json "$out/bench_cudaipc.json"
else
  record bench_cudaipc skipped 0 "no cudaipc transport, or CUDA IPC refused or not probed (ipc_probe exit $ipc)"
fi
py=python3
step bench_torch_p2p 120 "$py" "$here/torch_p2p.py" --json "$out/bench_torch_p2p.json"
if [ -x "$dpl" ]; then
  step bench_train_1gpu 60 "$dpl" train --device cuda --stages 1 --widths 1024,1024,1024,1024,1024,1024,1024,1024,1024 \
    --batch 256 --iterations 20 --json
  cp "$out/bench_train_1gpu.log" "$out/bench_train_1gpu.json" 2>/dev/null
  if [ -e "$build/transports/cudaipc" ] && [ $ipc -eq 0 ]; then
    step bench_train_1f1b 90 "$dpl" train --device cuda --transport cudaipc --nprocs 4 --policy 1f1b \
      --widths 1024,1024,1024,1024,1024,1024,1024,1024,1024 --batch 256 --iterations 20 --json
    cp "$out/bench_train_1f1b.log" "$out/bench_train_1f1b.json" 2>/dev/null
  else
    record bench_train_1f1b skipped 0 "no cudaipc transport, or CUDA IPC refused or not probed (ipc_probe exit $ipc)"
  fi
fi

finish $failed
