#!/bin/sh
# Runs every benchmark against a build tree and prints their JSON; keeps a
# copy of each result in <build>/bench/results/. Needs root.
#
#   bench/run_all.sh <build-dir>          (make bench does this)
#
# Environment:
#   BPF_COST_ARGS   extra arguments for bpf_cost (e.g. "--repeat 1000000 --rounds 3")
#   E2E_ARGS        extra arguments for e2e_throughput.py (e.g. "--pairs 3 --no-iptables")
#   PATH_COST_ARGS  extra arguments for path_cost.py (e.g. "--rounds 3 --paths veth")
#   PATH_COST_ACTIONS_ARGS  extra arguments for its actions section (e.g. "--actions-rounds 3")
#   OLD_LOSSD, DIAGNOSIS_COST_ARGS  the old build and extra arguments for diagnosis_cost.py
# (observer_bench.py and daemon_bench.py run by hand: docs/benchmarks-observer-daemon.md)
#   BENCH_STRICT=1  exit 1 when a target is missed (default: only when a benchmark fails)
set -u

BUILD=${1:?usage: $0 <build-dir>}
HERE=$(cd "$(dirname "$0")" && pwd)
PY=/usr/bin/python3   # Debian's python3: the one with python3-grpcio
# The benchmarks' Python: the e2e lab (tests/e2e/lab) and the Python client.
PYTHONPATH="$HERE/../tests/e2e:$HERE/../client/python${PYTHONPATH:+:$PYTHONPATH}"
PYTHONDONTWRITEBYTECODE=1
export PYTHONPATH PYTHONDONTWRITEBYTECODE
OUT="$BUILD/bench/results"
mkdir -p "$OUT"

if [ "$(id -u)" != 0 ]; then
  echo "run_all.sh: needs root (BPF, network namespaces)" >&2
  exit 2
fi
for f in "$BUILD/bench/bpf_cost" "$BUILD/daemon/lossd"; do
  if [ ! -x "$f" ]; then
    echo "run_all.sh: $f missing: build first (make build)" >&2
    exit 2
  fi
done

status=0
missed=""

run() {  # name, command...
  name=$1
  shift
  echo "== $name: $*" >&2
  if "$@" >"$OUT/$name.json"; then
    :
  else
    echo "run_all.sh: $name failed (exit $?)" >&2
    status=1
  fi
  cat "$OUT/$name.json"
  if ! "$PY" -c 'import json,sys; j=json.load(open(sys.argv[1])); t=j.get("target") or j.get("targets"); sys.exit(0 if t["pass"] else 1)' "$OUT/$name.json" 2>/dev/null; then
    missed="$missed $name"
  fi
}

# shellcheck disable=SC2086
run bpf_cost "$BUILD/bench/bpf_cost" ${BPF_COST_ARGS:-}
# shellcheck disable=SC2086
run e2e_throughput "$PY" "$HERE/e2e_throughput.py" --lossd "$BUILD/daemon/lossd" ${E2E_ARGS:-}
# shellcheck disable=SC2086
run path_cost "$PY" "$HERE/path_cost.py" --lossd "$BUILD/daemon/lossd" ${PATH_COST_ARGS:-}
# The actions beside drop on the veth path, against a 0 % drop rule (~3 minutes)
# shellcheck disable=SC2086
run path_cost_actions "$PY" "$HERE/path_cost.py" --lossd "$BUILD/daemon/lossd" --actions-only \
    ${PATH_COST_ACTIONS_ARGS:-}
run transport "$PY" "$HERE/transport_bench.py" --lossd "$BUILD/daemon/lossd" \
    --lossctl "$BUILD/client/lossctl/lossctl" --producer "$BUILD/bench/ring_producer"
run live_page "$PY" "$HERE/live_bench.py" --lossd "$BUILD/daemon/lossd" \
    --producer "$BUILD/bench/ring_producer" --stubs "$BUILD/python"
run guard "$PY" "$HERE/guard_bench.py" --lossd "$BUILD/daemon/lossd" --stubs "$BUILD/python"
run stop_latency "$PY" "$HERE/stop_latency.py" --lossd "$BUILD/daemon/lossd" --stubs "$BUILD/python"
run startup "$PY" "$HERE/startup_bench.py" --lossd "$BUILD/daemon/lossd" --stubs "$BUILD/python" \
    --prog-load "$BUILD/bench/prog_load"
# The diagnosis' cost against an older build (issue 13): OLD_LOSSD, default
# /tmp/cost-old/build/daemon/lossd (bench/diagnosis_cost.py says how to build it); skipped without it.
OLD_LOSSD=${OLD_LOSSD:-/tmp/cost-old/build/daemon/lossd}
if [ -x "$OLD_LOSSD" ]; then
  # shellcheck disable=SC2086
  run diagnosis_cost "$PY" "$HERE/diagnosis_cost.py" --lossd "$BUILD/daemon/lossd" --old-lossd "$OLD_LOSSD" \
      ${DIAGNOSIS_COST_ARGS:-}
else
  echo "== diagnosis_cost: skipped (no old build at $OLD_LOSSD)" >&2
fi
# shellcheck disable=SC2086
run soak "$PY" "$HERE/soak_bench.py" --lossd "$BUILD/daemon/lossd" --stubs "$BUILD/python" ${SOAK_ARGS:-}
# The libFuzzer targets, longer than ctest's 15 s (FUZZ_SECONDS each, default 120).
for f in rule_parsers records requests http_head; do
  [ -x "$BUILD/tests/fuzz/${f}_fuzz" ] &&
    run "fuzz_$f" "$HERE/../tests/fuzz/run.sh" "$BUILD/tests/fuzz/${f}_fuzz" "${FUZZ_SECONDS:-120}"
done

echo "== results in $OUT" >&2
if [ -n "$missed" ]; then
  echo "== targets missed:$missed" >&2
  [ "${BENCH_STRICT:-0}" = 1 ] && status=1
else
  echo "== all targets met" >&2
fi
exit $status
