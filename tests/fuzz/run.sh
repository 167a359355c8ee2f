#!/usr/bin/env bash
# tests/fuzz/run.sh FUZZER [SECONDS [JOBS]]: fuzz a target from a fixed seed corpus,
# with a fixed libFuzzer seed; NAME is FUZZER's name without _fuzz:
#   rule_parsers: every vector of tests/vectors/rule_parsers.json as the lines
#                 "FLAG=VALUE" the target reads, plus tests/fuzz/regressions/*;
#   others:       tests/fuzz/seeds/NAME/*.
# tests/fuzz/NAME.dict, if there, is its dictionary. The new inputs it finds go to a
# temp dir, removed after, unless LOSSD_FUZZ_CORPUS names a directory to keep them in.
# Exit 0: no crash, no sanitizer report, no broken promise (the target's comment)
# within SECONDS. Progress goes to stderr; stdout gets one JSON summary, with the
# coverage reached (libFuzzer's last "cov:" edges and "ft:" features; null with
# JOBS > 1) (bench/run_all.sh keeps it).
#   ctest -L fuzz                                10 s each (LOSSD_FUZZ_SECONDS)
#   tests/fuzz/run.sh build/tests/fuzz/rule_parsers_fuzz 600    ten minutes
#   make bench                                   120 s (bench/run_all.sh)
set -euo pipefail
fuzzer=$1
secs=${2:-20}
jobs=${3:-1}
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d /tmp/lossd-fuzz.XXXXXX)
trap 'rm -rf "$work"' EXIT
corpus=${LOSSD_FUZZ_CORPUS:-$work/corpus}
mkdir -p "$corpus" "$work/seeds"
name=$(basename "$fuzzer")
name=${name%_fuzz}
if [ "$name" != rule_parsers ]; then
  [ -d "$here/seeds/$name" ] || { echo "FAIL: no seeds in $here/seeds/$name" >&2; exit 1; }
  cp "$here/seeds/$name"/* "$work/seeds/"
else
/usr/bin/python3 - "$here/../vectors/rule_parsers.json" "$work/seeds" <<'PY'
import json, sys
doc = json.load(open(sys.argv[1]))
base = doc["base"]
for i, v in enumerate(doc["vectors"]):
    flags = dict(base)
    if v["flag"] in ("rate", "ge", "every", "first"):
        flags.pop("rate", None)
    flags.update(v.get("with", {}))
    flags[v["flag"]] = v["input"]
    with open("%s/vector-%03d" % (sys.argv[2], i), "w") as f:
        f.write("".join("%s=%s\n" % kv for kv in flags.items()))
PY
cp "$here"/regressions/* "$work/seeds/" 2>/dev/null || true
fi
dict=()
[ -f "$here/$name.dict" ] && dict=(-dict="$here/$name.dict")
exec 3>&1 1>&2
seeds=$(ls "$work/seeds" | wc -l)
echo "seeds: $seeds inputs; fuzzing ${secs}s, seed 1"
# Regressions first, once each: a fixed bug must stay fixed.
if ! "$fuzzer" -runs=0 -artifact_prefix="$work/seed-" "$work/seeds" > "$work/seeds.log" 2>&1; then
  tail -30 "$work/seeds.log"
  echo "FAIL: a seed input (a vector or a regression) fails"
  exit 1
fi
rc=0
"$fuzzer" -seed=1 -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -max_len=1024 \
  $([ "$jobs" -gt 1 ] && echo "-jobs=$jobs -workers=$jobs") -print_final_stats=1 ${dict[@]+"${dict[@]}"} \
  -artifact_prefix="$work/" "$corpus" "$work/seeds" > "$work/log" 2>&1 || rc=$?
grep -E "^#[0-9]+ +DONE|stat::|ERROR|${name}_fuzz:|SUMMARY" "$work/log" || true
stat() { sed -n "s/^stat::$1: *//p" "$work/log" | tail -1; }
cov=$(grep -oE "cov: [0-9]+ ft: [0-9]+" "$work/log" | tail -1 || true)
printf '{"benchmark": "fuzz_%s", "seconds": %s, "seed_inputs": %s, "executions": %s, "exec_per_sec": %s, "new_units": %s, "coverage": %s, "features": %s, "peak_rss_mb": %s, "findings": %s, "target": {"what": "no finding", "pass": %s}}\n' \
  "$name" "$secs" "$seeds" "$(stat number_of_executed_units)" "$(stat average_exec_per_sec)" \
  "$(stat new_units_added)" "$(echo "$cov" | awk '{print $2}' | grep . || echo null)" \
  "$(echo "$cov" | awk '{print $4}' | grep . || echo null)" \
  "$(stat peak_rss_mb)" "$([ "$rc" -eq 0 ] && echo 0 || echo 1)" \
  "$([ "$rc" -eq 0 ] && echo true || echo false)" >&3
if [ "$rc" -ne 0 ]; then
  tail -60 "$work/log"
  for a in "$work"/crash-* "$work"/leak-* "$work"/timeout-* "$work"/oom-*; do
    [ -e "$a" ] || continue
    echo "artifact $a:"; od -c "$a" | head -20
    cp "$a" /tmp/ && echo "kept as /tmp/$(basename "$a")"
  done
  echo "FAIL: the fuzzer stopped (exit $rc)"
  exit 1
fi
echo "ok: no finding in ${secs}s"
