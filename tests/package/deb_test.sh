#!/usr/bin/env bash
# make package's Debian package: cpack -G DEB of the build tree as it is (nothing
# rebuilt), into a directory of its own; its metadata and dependencies; lintian
# (every error and warning fails the test but those listed in KNOWN); then dpkg -i
# into this machine: lossd and lossctl on PATH print their version, man finds and
# renders both pages, the completion loads, the unit names /usr/sbin/lossd, the
# postinst made the lossd group; dpkg -r removes every file it put there, dpkg -P
# forgets it. Root only (exit 77 otherwise), and never over a lossd package or
# program already on the machine (exit 77).
#   deb_test.sh BUILD VERSION
set -euo pipefail
build=$1 version=$2
# The default maintainer address is a placeholder (dist/CMakeLists.txt): lintian says so.
KNOWN=${KNOWN:-"bogus-mail-host bogus-mail-host-in-debian-changelog"}
fail() { echo "FAIL: $*"; exit 1; }
[ "$(id -u)" = 0 ] || { echo "skipped: dpkg -i needs root"; exit 77; }
if dpkg-query -W -f='${Status}' lossd 2>/dev/null | grep -q 'ok installed\|half\|unpacked'; then
  echo "skipped: a lossd package is installed here; not replacing it"; exit 77; fi
for f in /usr/sbin/lossd /usr/bin/lossctl /usr/lib/systemd/system/lossd.service; do
  [ ! -e "$f" ] || { echo "skipped: $f exists (not from a package this test would own)"; exit 77; }
done
tmp=$(mktemp -d /tmp/lossd-deb-test.XXXXXX)
had_group=0; getent group lossd >/dev/null && had_group=1
installed=0
cleanup() {
  if [ $installed = 1 ]; then dpkg -P lossd >/dev/null 2>&1 || true; fi
  if [ $had_group = 0 ] && getent group lossd >/dev/null; then groupdel lossd || true; fi
  rm -rf "$tmp"
}
trap cleanup EXIT

cpack --config "$build/CPackConfig.cmake" -G DEB -B "$tmp/out" > "$tmp/cpack.log" 2>&1 ||
  { cat "$tmp/cpack.log"; fail "cpack"; }
deb=$tmp/out/lossd_${version}-1_$(dpkg --print-architecture).deb
[ -f "$deb" ] || { ls "$tmp/out"; fail "no $deb"; }
echo "ok: $(basename "$deb") ($(du -k "$deb" | cut -f1) KiB)"

field() { dpkg-deb -f "$deb" "$1"; }
[ "$(field Package)" = lossd ] && [ "$(field Version)" = "$version-1" ] && [ "$(field Section)" = net ] ||
  fail "control: $(dpkg-deb -f "$deb")"
deps=$(field Depends)
for d in adduser libbpf1 'libgrpc++1.51' libprotobuf32 libc6; do
  [[ ", $deps," == *", $d "* || ", $deps," == *", $d,"* ]] || fail "Depends lacks $d: $deps"
done
echo "ok: Depends: $deps"

if command -v lintian >/dev/null; then
  lintian --pedantic "$deb" > "$tmp/lintian.txt" 2>&1 || true
  sed 's/^/  lintian: /' "$tmp/lintian.txt"
  bad=$(grep -E '^[EW]: ' "$tmp/lintian.txt" | while read -r _ _ tag _; do
          case " $KNOWN " in *" $tag "*) ;; *) echo "$tag";; esac; done)
  [ -z "$bad" ] || fail "lintian: $bad"
  echo "ok: lintian (known: $KNOWN)"
else
  echo "lintian not installed (make deps installs it): not checked"
fi

dpkg -i "$deb" > "$tmp/dpkg.log" 2>&1 || { cat "$tmp/dpkg.log"; fail "dpkg -i"; }
installed=1
dpkg-query -W -f='${Status}\n' lossd | grep -q 'install ok installed' || fail "not installed"
dpkg -L lossd > "$tmp/files"
[ "$(PATH=/usr/sbin:/usr/bin:/sbin:/bin command -v lossd)" = /usr/sbin/lossd ] || fail "lossd not on PATH"
[ "$(PATH=/usr/sbin:/usr/bin:/sbin:/bin command -v lossctl)" = /usr/bin/lossctl ] || fail "lossctl not on PATH"
[ "$(PATH=/usr/sbin:/usr/bin lossd --version)" = "lossd $version" ] || fail "lossd --version"
[ "$(PATH=/usr/sbin:/usr/bin lossctl --version)" = "$version" ] || fail "lossctl --version"
echo "ok: lossd and lossctl from PATH: $(PATH=/usr/sbin:/usr/bin lossd --version)"
for page in "8 lossd" "1 lossctl"; do
  set -- $page
  f=$(man -w "$1" "$2") || fail "man -w $1 $2"
  [ "$f" = "/usr/share/man/man$1/$2.$1.gz" ] || fail "man -w $1 $2: $f"
  out=$(MANWIDTH=100 man -l "$f" 2>/dev/null | col -bx | tr -s ' ')
  grep -q "^ *$2 - " <<<"$out" || fail "man -l $f: no NAME line"
done
echo "ok: man finds and renders lossd(8) and lossctl(1)"
for p in lossctl lossd; do
  c=$(bash --norc --noprofile -c "source /usr/share/bash-completion/completions/$p && complete -p $p" 2>&1)
  [ "$c" = "complete -F _$p $p" ] || fail "completion $p: $c"
done
echo "ok: the completion loads"
unit=$(grep '/lossd.service$' "$tmp/files")
grep -q '^ExecStart=/usr/sbin/lossd ' "$unit" || fail "$unit: $(grep ExecStart "$unit")"
getent group lossd >/dev/null || fail "postinst did not create the group lossd"
echo "ok: $unit runs /usr/sbin/lossd; group lossd exists"

dpkg -r lossd > "$tmp/dpkg.log" 2>&1 || { cat "$tmp/dpkg.log"; fail "dpkg -r"; }
left=$(while read -r f; do [ -f "$f" ] || [ -L "$f" ] && echo "$f"; done < "$tmp/files" || true)
[ -z "$left" ] || fail "left after dpkg -r: $left"
dpkg -P lossd > "$tmp/dpkg.log" 2>&1 || { cat "$tmp/dpkg.log"; fail "dpkg -P"; }
installed=0
! dpkg-query -W -f='${Status}\n' lossd 2>/dev/null | grep -q installed || fail "still known to dpkg"
echo "ok: dpkg -r removed its $(wc -l < "$tmp/files") paths, dpkg -P purged it"
