#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Installs the build tree BUILD into a temporary prefix and checks what a
# user of the installed library gets: one public header, a shared library
# with SONAME libshmthrottle.so.0 exporting exactly the API, and a program
# outside the tree that builds with pkg-config and with find_package (shared
# and static each) and runs.  Usage: test_install.sh BUILD_DIR SOURCE_DIR
set -euo pipefail

if [ $# -ne 2 ]; then
  echo "usage: $0 BUILD_DIR SOURCE_DIR" >&2
  exit 2
fi
build=$(cd "$1" && pwd)
src=$(cd "$2" && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/shmt-install.XXXXXX")
seg=shmt-install-$$
cleanup() {
  rm -rf -- "$work"
  rm -f -- /dev/shm/"$seg"-*
}
trap cleanup EXIT

fail() {
  echo "test_install: FAIL: $*" >&2
  exit 1
}

cache() {
  sed -n "s/^$1:[A-Z]*=//p" "$build/CMakeCache.txt"
}

# A sanitized library needs its runtime loaded first, so the programs that
# link it are built with the same sanitizer.
cc=$(cache CMAKE_C_COMPILER)
case "$(cache SHMT_SANITIZE)" in
  address) sanflags="-fsanitize=address,undefined -fno-omit-frame-pointer" ;;
  thread) sanflags="-fsanitize=thread" ;;
  *) sanflags="" ;;
esac
echo "test_install: compiler $cc, sanitizer flags '${sanflags}'"

prefix=$work/prefix
cmake --install "$build" --prefix "$prefix" >"$work/install.log" ||
  { cat "$work/install.log" >&2; fail "cmake --install"; }

# The public header is the only header installed.
headers=$(cd "$prefix" && find include -type f | sort)
[ "$headers" = "include/shmthrottle.h" ] ||
  fail "installed headers: $(echo $headers)"

pcfile=$(find "$prefix" -name shmthrottle.pc -path '*/pkgconfig/*' | head -n1)
[ -n "$pcfile" ] || fail "no shmthrottle.pc installed"
libdir=$(dirname "$(dirname "$pcfile")")
so=$libdir/libshmthrottle.so
[ -f "$libdir/libshmthrottle.a" ] || fail "no static library in $libdir"
[ -L "$so" ] || fail "$so is not a symlink to the versioned library"

# SONAME: the major version only.
soname=$(readelf -d "$so" | sed -n 's/.*Library soname: \[\(.*\)\]/\1/p')
[ "$soname" = "libshmthrottle.so.0" ] || fail "SONAME is '$soname'"
[ -e "$libdir/$soname" ] || fail "$soname is not installed"

# Exports: exactly the functions the header declares SHMT_EXPORT.
declared=$(sed -nE 's/^SHMT_EXPORT[^(]*[ *](shmt_[a-z0-9_]+)\(.*/\1/p' \
  "$prefix/include/shmthrottle.h" | sort -u)
exported=$(nm -D --defined-only "$so" | awk 'NF == 3 { print $3 }' | sort -u)
[ -n "$declared" ] || fail "no SHMT_EXPORT declaration found in the header"
stray=$(comm -13 <(echo "$declared") <(echo "$exported"))
missing=$(comm -23 <(echo "$declared") <(echo "$exported"))
[ -z "$stray" ] || fail "exported but not public: $(echo $stray)"
[ -z "$missing" ] || fail "declared but not exported: $(echo $missing)"
echo "test_install: $soname exports the $(echo "$exported" | wc -l) public functions, nothing else"

# Run a program and return its format line; it must come from the
# installed library, not the build tree.
run_consumer() {
  local exe=$1 tag=$2 out loaded
  if [ "$tag" != static ]; then
    loaded=$(ldd "$exe" | sed -n 's/.*libshmthrottle\.so\.0 => \([^ ]*\) .*/\1/p')
    [ -n "$loaded" ] &&
      [ "$(realpath "$loaded")" = "$(realpath "$libdir/libshmthrottle.so.0")" ] ||
      fail "$exe loads '$loaded', not the installed library"
  elif ldd "$exe" | grep -q libshmthrottle; then
    fail "$exe was meant to link the static library"
  fi
  out=$("$exe" "/$seg-$tag") || fail "$exe exited with $?"
  echo "$out" | grep -qE '^format 0x[0-9a-f]{16} abi [0-9]+ version ' ||
    fail "$exe printed '$out'"
  [ ! -e "/dev/shm/$seg-$tag" ] || fail "$exe left its segment behind"
  echo "$out"
}

# 1. pkg-config.
export PKG_CONFIG_PATH=$libdir/pkgconfig
pcflags=$(pkg-config --cflags --libs shmthrottle) || fail "pkg-config"
echo "test_install: pkg-config gives: $pcflags"
# shellcheck disable=SC2086
"$cc" -std=c11 -Wall -Wextra -Werror $sanflags -o "$work/consumer_pc" \
  "$src/tests/install/consumer.c" $pcflags \
  -Wl,-rpath,"$(pkg-config --variable=libdir shmthrottle)" ||
  fail "building with pkg-config --cflags --libs shmthrottle"
f_pc=$(run_consumer "$work/consumer_pc" pc)

# The static library with pkg-config --static: its private dependencies
# (libatomic for the 16-byte CAS, librt, libpthread) come from Libs.private.
pcstatic=$(pkg-config --static --libs shmthrottle) || fail "pkg-config --static"
case " $pcstatic " in
  *" -latomic "*) ;;
  *) fail "pkg-config --static --libs gives '$pcstatic', without -latomic" ;;
esac
# The keyed hash is the library's own (lib/hash.h): the shared library
# needs no crypto library at run time.
if readelf -d "$libdir/libshmthrottle.so" | grep -q 'NEEDED.*sodium'; then
  fail "libshmthrottle.so needs libsodium: $(readelf -d "$libdir/libshmthrottle.so" | grep NEEDED | tr '\n' ' ')"
fi
# shellcheck disable=SC2086
"$cc" -std=c11 -Wall -Wextra -Werror $sanflags -o "$work/consumer_pcst" \
  "$src/tests/install/consumer.c" $(pkg-config --cflags shmthrottle) \
  "$libdir/libshmthrottle.a" ${pcstatic//-lshmthrottle/} ||
  fail "building with libshmthrottle.a and pkg-config --static --libs"
f_ps=$(run_consumer "$work/consumer_pcst" static)

# 2. find_package, shared and static.
cmake -S "$src/tests/install" -B "$work/cm" -DCMAKE_PREFIX_PATH="$prefix" \
  -DCMAKE_C_COMPILER="$cc" -DCMAKE_C_FLAGS="$sanflags" \
  -DCMAKE_EXE_LINKER_FLAGS="$sanflags" >"$work/cm.log" 2>&1 ||
  { cat "$work/cm.log" >&2; fail "configuring with find_package(shmthrottle)"; }
cmake --build "$work/cm" >>"$work/cm.log" 2>&1 ||
  { cat "$work/cm.log" >&2; fail "building with find_package(shmthrottle)"; }
f_cm=$(run_consumer "$work/cm/consumer" cmake)
f_st=$(run_consumer "$work/cm/consumer_static" static)

# The same library, however it was found, builds the same segment.
[ "$f_pc" = "$f_cm" ] && [ "$f_cm" = "$f_st" ] && [ "$f_st" = "$f_ps" ] ||
  fail "the four programs disagree: '$f_pc' '$f_cm' '$f_st' '$f_ps'"
echo "test_install: pkg-config (shared and static), find_package and static builds all print: $f_pc"
