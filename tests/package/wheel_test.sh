#!/usr/bin/env bash
# The Python client's wheel (target lossd_wheel, built offline) carries its stubs,
# installs into a fresh virtualenv with --no-index (Debian's grpcio and protobuf
# through --system-site-packages), and imports from there with no PYTHONPATH, no
# LOSSD_PYTHON_STUBS and no source tree in sight; python3 -m lossd_client and its
# sweep/trace modules start from the installed package.
#   wheel_test.sh WHEEL VERSION
set -euo pipefail
wheel=$1 version=$2
tmp=$(mktemp -d /tmp/lossd-wheel-test.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
[ -f "$wheel" ] || fail "no wheel at $wheel (cmake --build <build> --target lossd_wheel)"
[ "$(basename "$wheel")" = "lossd_client-$version-py3-none-any.whl" ] || fail "wheel name $(basename "$wheel")"

files=$(/usr/bin/python3 -c 'import sys, zipfile; print("\n".join(zipfile.ZipFile(sys.argv[1]).namelist()))' "$wheel")
for f in lossd_client/__init__.py lossd_client/__main__.py lossd_client/sweep.py lossd_client/trace.py \
         lossd_client/_generated/lossd/v1/lossd_pb2.py lossd_client/_generated/lossd/v1/lossd_pb2_grpc.py; do
  grep -qx "$f" <<<"$files" || fail "$f not in the wheel"
done
! grep -q '__pycache__\|\.pyc$' <<<"$files" || fail "bytecode in the wheel"

/usr/bin/python3 -m venv --system-site-packages "$tmp/venv"
env -u PIP_INDEX_URL -u PIP_FIND_LINKS PIP_DISABLE_PIP_VERSION_CHECK=1 \
  "$tmp/venv/bin/pip" install --no-index --quiet "$wheel" || fail "pip install --no-index"

cd "$tmp"   # outside the source tree
run() { env -u PYTHONPATH -u LOSSD_PYTHON_STUBS PYTHONDONTWRITEBYTECODE=1 "$tmp/venv/bin/python" "$@"; }
out=$(run -c 'import lossd_client, lossd_client._stubs as s; st = lossd_client.load_stubs()
print(lossd_client.__file__); print(st.root); print(st.pb2.DESCRIPTOR.package)')
site=$(run -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
[ "$(sed -n 1p <<<"$out")" = "$site/lossd_client/__init__.py" ] || fail "lossd_client imported from $(sed -n 1p <<<"$out")"
[ "$(sed -n 2p <<<"$out")" = "$site/lossd_client/_generated" ] || fail "stubs from $(sed -n 2p <<<"$out")"
[ "$(sed -n 3p <<<"$out")" = "lossd.v1" ] || fail "package $(sed -n 3p <<<"$out")"
echo "ok: imported from the venv with its bundled stubs ($site)"

[ "$("$tmp/venv/bin/pip" show lossd-client 2>/dev/null | sed -n 's/^Version: //p')" = "$version" ] || fail "pip show version"
grep -q '^python3 -m lossd_client COMMAND' <<<"$(run -m lossd_client --help)" || fail "python3 -m lossd_client --help"
grep -q -- '--rates' <<<"$(run -m lossd_client sweep --help)" || fail "python3 -m lossd_client sweep --help"
grep -q -- '--cookie' <<<"$(run -m lossd_client.trace --help)" || fail "python3 -m lossd_client.trace --help"
rc=0; err=$(run -m lossd_client status --socket "$tmp/none.sock" 2>&1) || rc=$?
[ $rc -eq 1 ] && grep -q 'not reachable' <<<"$err" || fail "status without a daemon: exit $rc: $err"
echo "ok: python3 -m lossd_client (status, sweep, trace) from the installed package"
