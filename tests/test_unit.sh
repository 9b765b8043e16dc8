#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The systemd unit as installed: written for the prefix given at install
# time (not the one configured), into systemd's unit directory for a
# package's prefix, next to a default config that loads and defines no
# limiters; `systemd-analyze verify` accepts it; its hardening leaves the
# daemon /dev/shm, /proc and its state directory.
# Usage: test_unit.sh BUILD_DIR
set -euo pipefail

if [ $# -ne 1 ]; then
  echo "usage: $0 BUILD_DIR" >&2
  exit 2
fi
build=$(cd "$1" && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/shmt-unit.XXXXXX")
trap 'rm -rf -- "$work"' EXIT

fail() {
  echo "test_unit: FAIL: $*" >&2
  exit 1
}

# The value of KEY= in unit file FILE (the last one wins, as in systemd).
unit_value() {
  sed -n "s/^$2=//p" "$1" | tail -n1
}

# 1. A prefix given only at install time.
prefix=$work/prefix
cmake --install "$build" --prefix "$prefix" >"$work/install.log" ||
  { cat "$work/install.log" >&2; fail "cmake --install"; }
unit=$prefix/lib/systemd/system/shmthrottled.service
[ -f "$unit" ] || fail "no unit at $unit"
exec_start=$(unit_value "$unit" ExecStart)
echo "test_unit: ExecStart=$exec_start"
read -r bin _ _ conf <<<"$exec_start"
[ "$bin" = "$prefix/sbin/shmthrottled" ] || fail "ExecStart runs '$bin'"
[ -x "$bin" ] || fail "$bin is not executable"
[ "$conf" = "$prefix/etc/shmthrottle/shmthrottled.conf" ] ||
  fail "ExecStart reads '$conf'"
[ -f "$conf" ] || fail "the config $conf is not installed"
! grep -q /usr/local "$unit" || fail "the unit still names /usr/local"
[ -f "$prefix/lib/sysusers.d/shmthrottle.conf" ] || fail "no sysusers file"
grep -q '^g shmthrottle' "$prefix/lib/sysusers.d/shmthrottle.conf" ||
  fail "the sysusers file makes no group shmthrottle"

# The default config loads and defines no limiters.
"$bin" --check-config "$conf" >"$work/resolved" ||
  fail "--check-config rejects the installed config"
! grep -q '^\[limiter' "$work/resolved" ||
  fail "the installed config defines limiters: $(grep '^\[limiter' "$work/resolved")"
grep -q '^mode = 0660$' "$work/resolved" || fail "the segment's mode is not 0660"

# 2. systemd-analyze verify.
if command -v systemd-analyze >/dev/null; then
  # The man pages named by Documentation= are looked up in the prefix.
  if MANPATH=$prefix/share/man: systemd-analyze verify "$unit" \
      >"$work/verify.log" 2>&1; then
    vrc=0
  else
    vrc=$?
  fi
  # verify reports a bad value as a warning and exits 0: any line about
  # the unit fails the test.
  if [ "$vrc" -ne 0 ] || grep -q 'shmthrottled' "$work/verify.log"; then
    cat "$work/verify.log" >&2
    fail "systemd-analyze verify (exit $vrc)"
  fi
  echo "test_unit: systemd-analyze verify passes"
else
  echo "test_unit: SKIP systemd-analyze verify: systemd-analyze not found"
fi

# 3. Hardening against what the daemon needs.  /dev/shm: the host's,
# writable (ProtectSystem=strict keeps /dev writable; PrivateDevices would
# not matter for /dev/shm in recent systemd but is left off on purpose).
# /proc: other users' processes visible (slot liveness).  The segment
# outlives the daemon: no RemoveIPC, no DynamicUser.  Snapshots: under the
# StateDirectory.
for bad in "PrivateDevices=yes" "ProtectProc=invisible" "ProtectProc=noaccess" \
    "RemoveIPC=yes" "DynamicUser=yes" "InaccessiblePaths=/dev/shm" \
    "ProcSubset=pid"; do
  ! grep -qx "$bad" "$unit" || fail "the unit sets $bad"
done
[ "$(unit_value "$unit" RemoveIPC)" = no ] || fail "RemoveIPC is not 'no'"
[ "$(unit_value "$unit" ProtectSystem)" = strict ] || fail "ProtectSystem"
state=$(unit_value "$unit" StateDirectory)
snap=$(sed -n 's/^snapshot = //p' "$work/resolved")
case "$snap" in
  "/var/lib/$state/"*) ;;
  *) fail "the snapshot '$snap' is not in the StateDirectory /var/lib/$state" ;;
esac
[ "$(unit_value "$unit" User)" = shmthrottle ] || fail "User="
grep -q '^u shmthrottle ' "$prefix/lib/sysusers.d/shmthrottle.conf" ||
  fail "the sysusers file makes no user shmthrottle"

# 4. An edited config survives a second install.
echo "# edited" >>"$conf"
cmake --install "$build" --prefix "$prefix" >"$work/install2.log" ||
  fail "second cmake --install"
tail -n1 "$conf" | grep -qx "# edited" || fail "a reinstall overwrote the config"

# 5. A package's layout: prefix /usr under DESTDIR.
DESTDIR=$work/root cmake --install "$build" --prefix /usr >"$work/install3.log" ||
  { cat "$work/install3.log" >&2; fail "DESTDIR install"; }
pcdir=$(pkg-config --variable=systemdsystemunitdir systemd 2>/dev/null || true)
[ -n "$pcdir" ] || pcdir=/usr/lib/systemd/system
unit=$work/root$pcdir/shmthrottled.service
[ -f "$unit" ] || fail "no unit in systemd's directory $pcdir"
[ "$(unit_value "$unit" ExecStart)" = \
  "/usr/sbin/shmthrottled -f -c /etc/shmthrottle/shmthrottled.conf" ] ||
  fail "ExecStart under /usr: $(unit_value "$unit" ExecStart)"
[ -f "$work/root/etc/shmthrottle/shmthrottled.conf" ] ||
  fail "no config in /etc for prefix /usr"
echo "test_unit: unit in $pcdir for prefix /usr; ExecStart follows the install prefix"
