#!/bin/bash
# A clients-only build (-DLOSSD_CLIENTS_ONLY=ON) on a machine without the BPF
# toolchain: in a private mount namespace clang (every /usr/lib/llvm-*/bin),
# bpftool, libbpf's headers and its pkg-config file are hidden under empty
# bind mounts. First a normal configure must FAIL there (proof that the
# hiding works), then the clients-only tree must configure, build lossctl,
# the rule tests and the Python stubs, and `lossctl --help` must run.
#   tests/clients_only.sh SOURCE_DIR [WORK_DIR]      (root: needs unshare -m)
# A temporary directory (in WORK_DIR, default /tmp) and the clients-only build tree
# ($CLIENTS_TREE, default inside that directory) are made afresh and removed at the end
# (KEEP_WORK=1 keeps them). A tree beside the main build tree, at its depth (tests/CMakeLists.txt
# passes build-clients-only), lets ccache give its compiles the main build's objects
# (CMakeLists.txt: LOSSD_CCACHE). A hit needs the same flags and every header the compile
# read, unchanged: one hidden here is a miss and a real compile, which fails as it must.
set -euo pipefail
src=$(cd "${1:?usage: clients_only.sh SOURCE_DIR [WORK_DIR]}" && pwd)
work=${2:-}
jobs=${JOBS:-2}

if [ "${LOSSD_HIDDEN:-}" != 1 ]; then
  # Only what this script makes is removed: a temporary directory inside WORK_DIR,
  # and a clients tree that is empty or a build tree (its CMakeCache.txt).
  [ -z "$work" ] || mkdir -p "$work"
  work=$(mktemp -d "${work:-/tmp}/lossd-clients-only.XXXXXX")
  tree=${CLIENTS_TREE:-$work/clients}
  if [ -e "$tree" ] && [ ! -f "$tree/CMakeCache.txt" ] && [ -n "$(ls -A "$tree")" ]; then
    echo "clients_only: FAIL: $tree is neither empty nor a build tree: not removing it" >&2
    rmdir "$work"
    exit 1
  fi
  rm -rf "$tree"
  cleanup() { [ "${KEEP_WORK:-}" = 1 ] || rm -rf "$work" "$tree"; }
  trap cleanup EXIT
  trap 'exit 143' TERM INT
  unshare -m --propagation private env LOSSD_HIDDEN=1 JOBS="$jobs" CLIENTS_TREE="$tree" "$0" "$src" "$work"
  exit $?
fi
tree=${CLIENTS_TREE:-$work/clients}

# ---- inside the mount namespace: hide the BPF toolchain ----
mkdir -p "$work/empty-dir" "$work/pc"
cp /usr/lib/*/pkgconfig/libbpf.pc "$work/pc/" 2>/dev/null || true  # for the second proof
: > "$work/empty-file"   # mode 0644: not executable, not a valid .pc
hide() { [ -e "$1" ] || return 0; if [ -d "$1" ]; then mount --bind "$work/empty-dir" "$1"; else mount --bind "$work/empty-file" "$1"; fi; echo "hidden: $1"; }
for d in /usr/lib/llvm-*/bin; do hide "$d"; done
for f in /usr/sbin/bpftool /sbin/bpftool /usr/bin/bpftool /usr/local/sbin/bpftool /usr/local/bin/bpftool; do
  [ -L "$f" ] && f=$(readlink -f "$f")
  hide "$f"
done
for pc in /usr/lib/*/pkgconfig/libbpf.pc /usr/lib/pkgconfig/libbpf.pc /usr/share/pkgconfig/libbpf.pc; do hide "$pc"; done
hide /usr/include/bpf

fail() { echo "clients_only: FAIL: $*" >&2; exit 1; }
command -v clang >/dev/null 2>&1 && clang --version >/dev/null 2>&1 && fail "clang still runs"
command -v bpftool >/dev/null 2>&1 && bpftool version >/dev/null 2>&1 && fail "bpftool still runs"
pkg-config --exists libbpf 2>/dev/null && fail "pkg-config still finds libbpf"
[ -e /usr/include/bpf/libbpf.h ] && fail "libbpf's headers are still there"
echo "clang, bpftool and libbpf are hidden"

# Proof that the hiding works: the full tree cannot configure here, failing
# on libbpf; given libbpf's .pc back, on clang; given a clang, on bpftool.
full_fails() {  # WHAT [cmake args...]
  local what=$1; shift
  rm -rf "$work/full"
  if cmake -S "$src" -B "$work/full" "$@" >"$work/full.log" 2>&1; then
    fail "the full tree configured with $what hidden: the hiding does not work"
  fi
  grep -q -i "$what" "$work/full.log" || { cat "$work/full.log"; fail "the full configure failed, but not on $what"; }
  echo "full configure fails on $what, as it must"
}
full_fails libbpf
if [ -f "$work/pc/libbpf.pc" ]; then
  PKG_CONFIG_PATH="$work/pc" full_fails clang
  PKG_CONFIG_PATH="$work/pc" full_fails bpftool -DCLANG=/bin/true
fi

# The clients-only tree: configure, build, run.
cmake -S "$src" -B "$tree" -DLOSSD_CLIENTS_ONLY=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  >"$work/clients.log" 2>&1 || { cat "$work/clients.log"; fail "clients-only configure"; }
cmake --build "$tree" -j "$jobs" --target lossctl rules_tests lossd_proto_python \
  >>"$work/clients.log" 2>&1 || { tail -50 "$work/clients.log"; fail "clients-only build"; }
[ -x "$tree/client/lossctl/lossctl" ] || fail "no lossctl binary"
command -v ccache >/dev/null && ccache --show-stats 2>/dev/null | grep -i -E "^ *(hits|misses|cache hit|cache miss)" || true
"$tree/client/lossctl/lossctl" --help >"$work/help.txt" || fail "lossctl --help"
grep -q "rule" "$work/help.txt" || fail "lossctl --help does not list its commands"
"$tree/client/lossctl/lossctl" rule add --help | grep -q -- "--per-segment" || fail "lossctl rule add --help"
"$tree/tests/unit/rules_tests" --gtest_brief=1 >"$work/rules_tests.log" 2>&1 ||
  { cat "$work/rules_tests.log"; fail "rules_tests"; }
[ -f "$tree/python/lossd/v1/lossd_pb2.py" ] || fail "no Python stubs"
ls "$tree/bpf" "$tree/daemon/CMakeFiles" >/dev/null 2>&1 && fail "the clients-only tree has BPF or daemon targets"
echo "clients_only: OK (lossctl built and runs; rules_tests pass; Python stubs generated)"
