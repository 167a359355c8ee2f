#!/usr/bin/env bash
# dist/lossd.service.in (as configured, build/dist/lossd.service): systemd (252, Debian's systemd package) verifies it
# offline, and its sandboxing scores an exposure of at most MAX_EXPOSURE
# (`systemd-analyze security --offline`; the unit without sandboxing scored
# 9.7 UNSAFE). systemd does not run on these machines: the unit is not started
# here; daemon_channel_test.py runs lossd under the unit's capability set.
set -euo pipefail
unit=$1
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
echo "ok: verified, exposure $level"
