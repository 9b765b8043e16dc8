#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Every function the public header exports is named in the NAME section of
# a section 3 page, and every page renders.
# Usage: test_man_coverage.sh SOURCE_DIR
set -euo pipefail
src=$1
declared=$(sed -nE 's/^SHMT_EXPORT[^(]*[ *](shmt_[a-z0-9_]+)\(.*/\1/p' \
  "$src/lib/include/shmthrottle.h" | sort -u)
[ -n "$declared" ] || { echo "test_man_coverage: FAIL: no declarations found" >&2; exit 1; }
named=$(sed -nE 's/^\.Nm (shmt_[a-z0-9_]+).*/\1/p' "$src"/man/*.3 | sort -u)
missing=$(comm -23 <(echo "$declared") <(echo "$named"))
stray=$(comm -13 <(echo "$declared") <(echo "$named"))
[ -z "$missing" ] || { echo "test_man_coverage: FAIL: no page names: $(echo $missing)" >&2; exit 1; }
[ -z "$stray" ] || { echo "test_man_coverage: FAIL: pages name what the header does not export: $(echo $stray)" >&2; exit 1; }
for page in "$src"/man/*.[1-8]; do
  mandoc -T utf8 "$page" >/dev/null || { echo "test_man_coverage: FAIL: $page does not render" >&2; exit 1; }
done
echo "test_man_coverage: $(echo "$declared" | wc -l) functions, each on a page"
