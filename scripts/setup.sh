#!/usr/bin/env bash
# Installs, with apt-get, whatever the build, the tests and the bench need and
# the machine lacks.  Safe to run again: it installs nothing already there.
set -euo pipefail

pkgs=(build-essential cmake pkg-config git
      libck-dev liburcu-dev libsodium-dev libcmocka-dev libinih-dev libsystemd-dev libjansson-dev
      spin redis-server libhiredis-dev liblmdb-dev libxxhash-dev gnuplot-nox clang libclang-rt-14-dev valgrind tmux
      libmicrohttpd-dev curl prometheus mandoc
      python3-dev python3-pytest gunicorn python3-redis)

missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all packages present"
  exit 0
fi
echo "setup: installing ${missing[*]}"
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "setup: done"
