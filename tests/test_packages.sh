#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The Debian packages: `cpack -G DEB` on the build tree gives
# libshmthrottle0, libshmthrottle-dev and shmthrottle (and
# python3-shmthrottle when the binding is built); each is unpacked
# with `dpkg -x` into a scratch root (nothing is installed on this
# machine), where the CLI answers --help and --version, the daemon accepts
# the packaged config with --check-config, the unit names /usr/sbin and
# verifies, and a program builds against the -dev files and runs on the
# library package.  Usage: test_packages.sh BUILD_DIR SOURCE_DIR VERSION
set -euo pipefail

if [ $# -ne 3 ]; then
  echo "usage: $0 BUILD_DIR SOURCE_DIR VERSION" >&2
  exit 2
fi
build=$(cd "$1" && pwd)
src=$(cd "$2" && pwd)
version=$3
work=$(mktemp -d "${TMPDIR:-/tmp}/shmt-deb.XXXXXX")
seg=shmt-deb-$$
trap 'rm -rf -- "$work"; rm -f -- /dev/shm/"$seg"*' EXIT

fail() {
  echo "test_packages: FAIL: $*" >&2
  exit 1
}

command -v cpack >/dev/null || fail "cpack not found"
command -v dpkg-deb >/dev/null || fail "dpkg-deb not found"
(cd "$work" && cpack -G DEB --config "$build/CPackConfig.cmake" -B "$work/pkgs") \
  >"$work/cpack.log" 2>&1 || { cat "$work/cpack.log" >&2; fail "cpack -G DEB"; }

arch=$(dpkg --print-architecture)
lib=$work/pkgs/libshmthrottle0_${version}_$arch.deb
dev=$work/pkgs/libshmthrottle-dev_${version}_$arch.deb
tools=$work/pkgs/shmthrottle_${version}_$arch.deb
for deb in "$lib" "$dev" "$tools"; do
  [ -f "$deb" ] || fail "no package $(basename "$deb"): $(ls "$work/pkgs")"
  dpkg-deb --info "$deb" >/dev/null || fail "$(basename "$deb") is not a package"
done
[ "$(dpkg-deb -f "$dev" Depends)" = "libshmthrottle0 (= $version)" ] ||
  fail "libshmthrottle-dev depends on '$(dpkg-deb -f "$dev" Depends)'"
# (Listings go to files first: grep -q on a pipe could stop its writer
# with SIGPIPE, which pipefail reports as a failure.)
dpkg-deb -f "$tools" Depends >"$work/depends"
grep -q libmicrohttpd "$work/depends" ||
  fail "shmthrottle does not depend on libmicrohttpd"

root=$work/root
mkdir "$root"
for deb in "$lib" "$dev" "$tools"; do
  dpkg -x "$deb" "$root"
done

# What goes where.
for f in usr/bin/shmthrottle usr/sbin/shmthrottled usr/include/shmthrottle.h \
    usr/lib/sysusers.d/shmthrottle.conf etc/shmthrottle/shmthrottled.conf \
    usr/share/man/man1/shmthrottle.1 usr/share/man/man8/shmthrottled.8 \
    usr/share/man/man5/shmthrottled.conf.5 usr/share/man/man3/shmt_open.3; do
  [ -e "$root/$f" ] || fail "no /$f in the packages"
done
for deb in "$lib" "$dev" "$tools"; do
  dpkg-deb -c "$deb" >"$work/$(basename "$deb").list"
done
! grep -q shmthrottle-demo "$work/$(basename "$tools").list" || fail "the demo is packaged"
pc=$(find "$root" -name shmthrottle.pc | head -n1)
[ -n "$pc" ] || fail "no shmthrottle.pc"
[ -n "$(find "$root" -name shmthrottleConfig.cmake)" ] || fail "no CMake package"
grep -q 'libshmthrottle\.so\.0\.' "$work/$(basename "$lib").list" ||
  fail "no library in libshmthrottle0"
! grep -qE 'include|\.a$|pkgconfig' "$work/$(basename "$lib").list" ||
  fail "libshmthrottle0 holds development files"
dpkg-deb -e "$tools" "$work/ctl"
grep -qx /etc/shmthrottle/shmthrottled.conf "$work/ctl/conffiles" ||
  fail "the config is not a conffile"

# The programs from the scratch root.
"$root/usr/bin/shmthrottle" --help >"$work/help" || fail "shmthrottle --help exited $?"
grep -q '^    shmthrottle - ' "$work/help" || fail "shmthrottle --help printed: $(head -3 "$work/help")"
[ "$("$root/usr/bin/shmthrottle" --version | head -n1)" = \
  "shmthrottle $version (library $version)" ] || fail "shmthrottle --version"
"$root/usr/sbin/shmthrottled" --check-config "$root/etc/shmthrottle/shmthrottled.conf" \
  >"$work/resolved" || fail "shmthrottled --check-config on the packaged config"
! grep -q '^\[limiter' "$work/resolved" || fail "the packaged config defines limiters"
echo "test_packages: CLI and --check-config run from the unpacked packages"

# The unit: for /usr, in systemd's directory; verified with its paths
# mapped into the scratch root.
unitdir=$(pkg-config --variable=systemdsystemunitdir systemd 2>/dev/null || echo /usr/lib/systemd/system)
unit=$root$unitdir/shmthrottled.service
[ -f "$unit" ] || fail "no unit in $unitdir"
grep -qx 'ExecStart=/usr/sbin/shmthrottled -f -c /etc/shmthrottle/shmthrottled.conf' "$unit" ||
  fail "ExecStart: $(grep ExecStart= "$unit")"
if command -v systemd-analyze >/dev/null; then
  sed -e "s|=/usr/sbin/|=$root/usr/sbin/|" -e "s| /etc/shmthrottle/| $root/etc/shmthrottle/|" \
    "$unit" >"$work/shmthrottled.service"
  MANPATH=$root/usr/share/man: systemd-analyze verify "$work/shmthrottled.service" \
    >"$work/verify.log" 2>&1 || { cat "$work/verify.log" >&2; fail "systemd-analyze verify"; }
  ! grep -q shmthrottled "$work/verify.log" || { cat "$work/verify.log" >&2; fail "verify warns"; }
else
  echo "test_packages: SKIP systemd-analyze verify: systemd-analyze not found"
fi

# The Python module's package, when the binding was built: Debian's
# python3 imports it from the scratch root and opens a segment with it.
py=$(ls "$work"/pkgs/python3-shmthrottle_"${version}"_*.deb 2>/dev/null | head -n1 || true)
if grep -q '^SHMT_PY_MINOR:INTERNAL=' "$build/CMakeCache.txt"; then
  [ -n "$py" ] || fail "the binding is built but there is no python3-shmthrottle package"
  dpkg-deb -f "$py" Depends | grep -q '^python3 (>= 3\.' ||
    fail "python3-shmthrottle depends on '$(dpkg-deb -f "$py" Depends)'"
  dpkg -x "$py" "$root"
  [ -f "$root/usr/lib/python3/dist-packages/shmthrottle/__init__.py" ] ||
    fail "no module in python3-shmthrottle"
  ! find "$root/usr" -name shmthrottle.pth | grep -q . || fail "the package writes a .pth"
  case "$(sed -n 's/^SHMT_SANITIZE:[A-Z]*=//p' "$build/CMakeCache.txt")" in
    address|thread) echo "test_packages: SKIP importing the module: a sanitizer build's module needs its runtime preloaded" ;;
    *)
      pyout=$(PYTHONPATH=$root/usr/lib/python3/dist-packages /usr/bin/python3 -c '
import shmthrottle
print(shmthrottle.__file__, shmthrottle.version())
') || fail "importing the packaged module with /usr/bin/python3"
      case "$pyout" in
        "$root"/usr/lib/python3/dist-packages/shmthrottle/__init__.py\ "$version") ;;
        *) fail "the packaged module printed '$pyout'" ;;
      esac
      echo "test_packages: /usr/bin/python3 imported the packaged module: $pyout" ;;
  esac
fi

# A program built against the -dev files, run on libshmthrottle0's library
# (built with the build's sanitizer, if any, as test_install.sh does).
libdir=$(dirname "$(dirname "$pc")")
case "$(sed -n 's/^SHMT_SANITIZE:[A-Z]*=//p' "$build/CMakeCache.txt")" in
  address) sanflags="-fsanitize=address,undefined -fno-omit-frame-pointer" ;;
  thread) sanflags="-fsanitize=thread" ;;
  *) sanflags="" ;;
esac
flags=$(PKG_CONFIG_PATH=$libdir/pkgconfig pkg-config --cflags --libs shmthrottle) ||
  fail "pkg-config on the packaged .pc"
# shellcheck disable=SC2086
cc -std=c11 -Wall -Wextra -Werror $sanflags -o "$work/consumer" "$src/tests/install/consumer.c" \
  $flags -Wl,-rpath,"$libdir" || fail "building against libshmthrottle-dev"
out=$("$work/consumer" "/$seg") || fail "the consumer exited $?"
echo "$out" | grep -qE '^format 0x[0-9a-f]{16} abi [0-9]+ version ' || fail "consumer printed '$out'"
ldd "$work/consumer" >"$work/ldd"
grep -q "$libdir/libshmthrottle.so.0" "$work/ldd" ||
  fail "the consumer did not load the packaged library"
echo "test_packages: built and ran against the packages: $out"
