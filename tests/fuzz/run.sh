#!/usr/bin/env bash
# tests/fuzz/run.sh FUZZER [SECONDS [JOBS]]: fuzz the rule parsers from a fixed
# seed corpus (every vector of tests/vectors/rule_parsers.json as the lines
# "FLAG=VALUE" the target reads, plus tests/fuzz/regressions/*), with a fixed
# libFuzzer seed; the new inputs it finds go to a temp dir, removed after, unless
# LOSSD_FUZZ_CORPUS names a directory to keep them in. Exit 0: no crash, no
# sanitizer report, no broken promise (rule_parsers_fuzz.cc) within SECONDS.
# Progress goes to stderr; stdout gets one JSON summary (bench/run_all.sh keeps it).
#   ctest -R fuzz_rule_parsers                   20 s (LOSSD_FUZZ_SECONDS)
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
  $([ "$jobs" -gt 1 ] && echo "-jobs=$jobs -workers=$jobs") -print_final_stats=1 -dict="$here/rule_parsers.dict" \
  -artifact_prefix="$work/" "$corpus" "$work/seeds" > "$work/log" 2>&1 || rc=$?
grep -E "^#[0-9]+ +DONE|stat::|ERROR|rule_parsers_fuzz:|SUMMARY" "$work/log" || true
stat() { sed -n "s/^stat::$1: *//p" "$work/log" | tail -1; }
printf '{"benchmark": "fuzz_rule_parsers", "seconds": %s, "seed_inputs": %s, "executions": %s, "exec_per_sec": %s, "new_units": %s, "peak_rss_mb": %s, "findings": %s, "target": {"what": "no finding", "pass": %s}}\n' \
  "$secs" "$seeds" "$(stat number_of_executed_units)" "$(stat average_exec_per_sec)" \
  "$(stat new_units_added)" "$(stat peak_rss_mb)" "$([ "$rc" -eq 0 ] && echo 0 || echo 1)" \
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
