#!/usr/bin/env bash
# make install DESTDIR=... (cmake --install of the build tree as it is: nothing is
# rebuilt) puts exactly the files dist/CMakeLists.txt names under a prefix of its
# own, and each works from there: the unit names lossd at that prefix, both
# programs print their version, both man pages render with their NAME section,
# the completion loads in bash, and a C++ client configured with
# find_package(lossd) against that prefix builds.
#   install_test.sh BUILD VERSION LIBDIR SOURCE
set -euo pipefail
build=$1 version=$2 libdir=$3 src=$4
tmp=$(mktemp -d /tmp/lossd-install-test.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

prefix=/opt/lossd-install-test   # not the default: what follows the prefix must follow it
DESTDIR=$tmp/dest cmake --install "$build" --prefix "$prefix" > "$tmp/install.log" ||
  { cat "$tmp/install.log"; fail "cmake --install"; }
root=$tmp/dest$prefix

expected=$(sort <<EOF2
bin/lossctl
include/lossd/v1/lossd.grpc.pb.h
include/lossd/v1/lossd.pb.h
$libdir/cmake/lossd/lossdConfig.cmake
$libdir/cmake/lossd/lossdConfigVersion.cmake
$libdir/cmake/lossd/lossdTargets-relwithdebinfo.cmake
$libdir/cmake/lossd/lossdTargets.cmake
$libdir/liblossd_proto.a
lib/systemd/system/lossd.service
sbin/lossd
share/bash-completion/completions/lossctl
share/bash-completion/completions/lossd
share/doc/lossd/README.md
share/doc/lossd/changelog.Debian.gz
share/doc/lossd/copyright
share/doc/lossd/examples/lossd.conf
share/lintian/overrides/lossd
share/lossd/proto/lossd/v1/lossd.proto
share/man/man1/lossctl.1.gz
share/man/man8/lossd.8.gz
EOF2
)
# (the build type's targets file is named after it: accept any one)
got=$(cd "$root" && find . -type f -o -type l | sed 's|^\./||' |
      sed -E 's|lossdTargets-[a-z]+\.cmake$|lossdTargets-relwithdebinfo.cmake|' | sort)
if [ "$got" != "$expected" ]; then
  diff <(echo "$expected") <(echo "$got") || true
  fail "installed files differ from the list (< expected, > installed)"
fi
[ "$(find "$tmp/dest" -mindepth 1 -maxdepth 1)" = "$tmp/dest/opt" ] || fail "files outside the prefix: $(ls "$tmp/dest")"
echo "ok: $(echo "$got" | wc -l) files under $prefix"

unit=$root/lib/systemd/system/lossd.service
grep -q "^ExecStart=$prefix/sbin/lossd " "$unit" || fail "$(grep ExecStart "$unit") does not name $prefix/sbin/lossd"
grep -q "^Documentation=man:lossd(8) file://$prefix/share/doc/lossd/README.md$" "$unit" || fail "$(grep Documentation "$unit")"
! grep -n '@[A-Z_]*@' "$unit" || fail "an unconfigured @VAR@ in the unit"
echo "ok: the unit runs $prefix/sbin/lossd"

[ "$("$root/sbin/lossd" --version)" = "lossd $version" ] || fail "lossd --version: $("$root/sbin/lossd" --version)"
[ "$("$root/bin/lossctl" --version)" = "$version" ] || fail "lossctl --version: $("$root/bin/lossctl" --version)"
echo "ok: lossd --version, lossctl --version from $prefix"

man_page() {  # FILE NAME-LINE [TEXT...]: renders without a warning, with these lines
  local f=$1 out err
  out=$(MANWIDTH=100 LC_ALL=C.UTF-8 man -l "$f" 2>"$tmp/man.err" | col -bx | tr -s ' ') || fail "man -l $f"
  err=$(cat "$tmp/man.err")
  [ -z "$err" ] || fail "man -l $f warned: $err"
  shift
  # grep reads a here-string: `printf | grep -q` fails under pipefail when grep stops
  # reading before printf is done (SIGPIPE), which a long page made happen.
  grep -q '^NAME *$' <<<"$out" || fail "$f: no NAME section"
  for t in "$@"; do grep -qF -- "$t" <<<"$out" ||
    fail "$f: no '$t' in (blanks squeezed; first lines):
$(printf '%s\n' "$out" | head -20)"; done
}
man_page "$root/share/man/man8/lossd.8.gz" "lossd - eBPF packet-loss injector and TCP observer" \
  "SYNOPSIS" "--max-rules" "--socket-group" "lossctl(1)"
man_page "$root/share/man/man1/lossctl.1.gz" "lossctl - control lossd" "COMMANDS" \
  "lossctl rule add" "lossctl flow trace" "--rates" "lossd(8)"
echo "ok: man -l renders lossd(8) and lossctl(1)"

for p in lossctl lossd; do
  c=$(bash --norc --noprofile -c "source '$root/share/bash-completion/completions/$p' && complete -p $p" \
      2>"$tmp/bash.err") || fail "the $p completion does not load: $(cat "$tmp/bash.err")"
  [ ! -s "$tmp/bash.err" ] || fail "the $p completion: $(cat "$tmp/bash.err")"
  [ "$c" = "complete -F _$p $p" ] || fail "complete -p $p: $c"
done
echo "ok: the completion loads in bash"

# find_package(lossd) against the installed prefix: configure and build a client.
launcher=(); command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
cmake -S "$src/tests/package/cxx_client" -B "$tmp/cxx" -DCMAKE_PREFIX_PATH="$root" "${launcher[@]}" \
  > "$tmp/cxx.log" 2>&1 || { cat "$tmp/cxx.log"; fail "find_package(lossd): configure"; }
cmake --build "$tmp/cxx" > "$tmp/cxx.log" 2>&1 || { cat "$tmp/cxx.log"; fail "find_package(lossd): build"; }
[ "$(cat "$tmp/cxx/proto_dir.txt")" = "$root/share/lossd/proto" ] || fail "lossd_PROTO_DIR: $(cat "$tmp/cxx/proto_dir.txt")"
rc=0; "$tmp/cxx/cxx_client" 2>/dev/null || rc=$?
[ $rc -eq 2 ] || fail "cxx_client without arguments should exit 2"
echo "ok: a client configured with find_package(lossd) against $prefix builds"
