#!/usr/bin/env bash
# dist/lossd.service.in (as configured, build/dist/lossd.service): systemd (252, Debian's systemd package) verifies it
# offline, and its sandboxing scores an exposure of at most MAX_EXPOSURE
# (`systemd-analyze security --offline`; the unit without sandboxing scored
# 9.7 UNSAFE). systemd does not run on these machines: the unit is not started
# here; daemon_channel_test.py runs lossd under the unit's capability set.
# With LOSSD (the binary), the unit's resource limits hold what lossd's own caps
# allow at their defaults (lossd --help): open files for every connection of
# both listeners plus its BPF objects, tasks for every stream's thread, memory
# for the whole stream budget.
set -euo pipefail
unit=$1
lossd=${2:-}
MAX_EXPOSURE=${MAX_EXPOSURE:-3.0}
command -v systemd-analyze >/dev/null || { echo "skipped: no systemd-analyze (apt-get install systemd)"; exit 77; }
dir=$(mktemp -d /tmp/lossd-unit-test.XXXXXX)
trap 'rm -rf "$dir"' EXIT
# verify checks that ExecStart's binary exists and that man finds the Documentation=
# page: neither is installed here (tests/package checks both where they are installed).
sed -e 's|^ExecStart=/[^ ]*/sbin/lossd |ExecStart=/bin/true |' \
    -e '/^Documentation=/s| man:lossd(8)||; /^Documentation=/s|=man:lossd(8) |=|' "$unit" > "$dir/lossd.service"
grep -q '^ExecStart=/bin/true ' "$dir/lossd.service" || { echo "no ExecStart=<prefix>/sbin/lossd in $unit"; exit 1; }
out=$(cd "$dir" && systemd-analyze verify ./lossd.service 2>&1) || { echo "$out"; echo "FAIL: systemd-analyze verify"; exit 1; }
if [ -n "$out" ]; then echo "$out"; echo "FAIL: systemd-analyze verify warned"; exit 1; fi
sec=$(cd "$dir" && systemd-analyze security --offline=yes ./lossd.service 2>&1 || true)
level=$(printf '%s\n' "$sec" | sed -n 's/.*Overall exposure level for lossd.service: \([0-9.]*\).*/\1/p')
[ -n "$level" ] || { echo "$sec"; echo "FAIL: no exposure level"; exit 1; }
echo "MEASURED unit_exposure {\"exposure\": $level, \"max\": $MAX_EXPOSURE}"
awk -v l="$level" -v m="$MAX_EXPOSURE" 'BEGIN { exit !(l <= m) }' || {
  printf '%s\n' "$sec" | grep '✗'; echo "FAIL: exposure $level > $MAX_EXPOSURE"; exit 1; }
# The socket's group is the operators' group the unit documents.
grep -q -- '--socket-group lossd' "$unit" && grep -q '^Group=lossd' "$unit" || {
  echo "FAIL: the unit does not give the socket its group"; exit 1; }
if [ -n "$lossd" ]; then
  help=$("$lossd" --help)
  dflt() { printf '%s\n' "$help" | sed -n "s/^ *--$1 [^=]*=\([0-9]*\).*/\1/p" | head -1; }
  unitval() { sed -n "s/^$1=\([0-9]*\)\([GM]\?\)$/\1 \2/p" "$unit"; }
  conns=$(dflt max-connections); http=$(dflt http-max-connections); streams=$(dflt max-streams)
  mem=$(dflt max-stream-memory)
  for v in conns http streams mem; do [ -n "${!v}" ] || { echo "FAIL: no default for $v in lossd --help"; exit 1; }; done
  read -r nofile _ <<<"$(unitval LimitNOFILE)"; read -r tasks _ <<<"$(unitval TasksMax)"
  read -r memmax unit_suffix <<<"$(unitval MemoryMax)"
  [ -n "${nofile:-}" ] && [ -n "${tasks:-}" ] && [ -n "${memmax:-}" ] || {
    echo "FAIL: the unit sets no LimitNOFILE=, TasksMax= or MemoryMax= (numbers)"; exit 1; }
  case "$unit_suffix" in G) memmax=$((memmax * 1024)) ;; M) ;; *) memmax=$((memmax / 1048576)) ;; esac
  need_files=$((conns + 32 + http + 1024)); need_tasks=$((streams + http + 64)); need_mem=$((mem + 512))
  echo "MEASURED unit_limits {\"nofile\": $nofile, \"need_files\": $need_files, \"tasks\": $tasks, \"need_tasks\": $need_tasks, \"memory_mib\": $memmax, \"need_memory_mib\": $need_mem}"
  [ "$nofile" -ge "$need_files" ] || { echo "FAIL: LimitNOFILE=$nofile < $need_files (--max-connections + 32 for root + --http-max-connections + 1024)"; exit 1; }
  [ "$tasks" -ge "$need_tasks" ] || { echo "FAIL: TasksMax=$tasks < $need_tasks (--max-streams + --http-max-connections + 64)"; exit 1; }
  [ "$memmax" -ge "$need_mem" ] || { echo "FAIL: MemoryMax=${memmax}M < ${need_mem}M (--max-stream-memory + 512 MiB)"; exit 1; }
fi
echo "ok: verified, exposure $level"
