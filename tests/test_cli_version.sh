#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# `shmthrottle --version` names the tool's and the library's version (the
# project's) and the segment format this build writes, the same format
# word and ABI that `stat` shows for a segment it created.
# Usage: test_cli_version.sh SHMTHROTTLE PROJECT_VERSION
set -euo pipefail

cli=$1
want=$2
seg=/shmt-test-version-$$
trap '"$cli" -s "$seg" destroy --force >/dev/null 2>&1 || true' EXIT

fail() {
  echo "test_cli_version: FAIL: $*" >&2
  exit 1
}

out=$("$cli" --version) || fail "--version exited with $?"
echo "$out"
[ "$(echo "$out" | sed -n 1p)" = "shmthrottle $want (library $want)" ] ||
  fail "first line: $(echo "$out" | sed -n 1p)"
fmt=$(echo "$out" | sed -n 's/^segment format \(0x[0-9a-f]\{16\}\) (ABI \([0-9]*\))$/\1 \2/p')
[ -n "$fmt" ] || fail "no segment format line"

"$cli" -s "$seg" create --dict 0 --counters 0 --analyzer 0 >/dev/null ||
  fail "create"
seen=$("$cli" -s "$seg" stat | sed -n 's/^format *\(0x[0-9a-f]\{16\}\) (ABI \([0-9]*\))$/\1 \2/p')
[ "$fmt" = "$seen" ] || fail "--version says '$fmt', stat of a new segment '$seen'"
echo "test_cli_version: --version and stat agree on format $fmt"
