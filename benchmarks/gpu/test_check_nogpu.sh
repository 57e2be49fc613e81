#!/bin/sh
# test_check_nogpu.sh CHECK OUTDIR - check.sh on a machine without a GPU:
# exit 77, a JSON and a table that say so, nothing built; bad flags exit
# 2. Where a GPU is seen, the case does not apply: prints SKIP.
set -u
check=$1 out=$2
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q GPU; then
  echo "SKIP: this machine has a GPU"; exit 0
fi
rm -rf "$out" && mkdir -p "$out" || exit 1
fail() { echo "FAIL: $*"; exit 1; }
"$check" --out "$out/o" --build "$out/b" >"$out/log" 2>&1
rc=$?
[ $rc -eq 77 ] || fail "exit $rc, not 77: $(cat "$out/log")"
[ ! -e "$out/b/CMakeCache.txt" ] || fail "it configured a build without a GPU"
python3 - "$out/o/check.json" <<'PY' || fail "check.json: see above"
import json, sys
d = json.load(open(sys.argv[1]))
assert d["exit"] == 77, d
s = d["steps"]
assert len(s) == 1 and s[0]["name"] == "gpu" and s[0]["status"] == "skipped", s
assert "no GPU" in s[0]["detail"], s
assert d["gpu"].startswith("none"), d
PY
grep -q '| gpu | skipped |' "$out/o/check.md" || fail "check.md lacks the gpu row"
"$check" --budget soon >"$out/log2" 2>&1
rc=$?
[ $rc -eq 2 ] || fail "--budget soon: exit $rc, not 2"
grep -q "'soon'" "$out/log2" || fail "--budget soon: the message does not name the value"
"$check" --frobnicate >"$out/log3" 2>&1
[ $? -eq 2 ] || fail "--frobnicate: not exit 2"
grep -q "frobnicate" "$out/log3" || fail "--frobnicate: the message does not name it"
echo "PASS: check.sh without a GPU exits 77 and says why; bad flags exit 2"
