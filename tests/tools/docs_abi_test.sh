#!/usr/bin/env bash
# The HAL ABI version the README's parts table names is the one hal.h
# defines: a stale version in the project's front page is a test failure.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
header="$root/hal/include/sigma/hal.h"
major=$(sed -n 's/^#define HAL_ABI_MAJOR \([0-9]*\).*/\1/p' "$header")
minor=$(sed -n 's/^#define HAL_ABI_MINOR \([0-9]*\).*/\1/p' "$header")
if [ -z "$major" ] || [ -z "$minor" ]; then
  echo "FAIL: no HAL_ABI_MAJOR / HAL_ABI_MINOR in $header"
  exit 1
fi
named=$(grep -o '^| HAL ABI [0-9]*\.[0-9]* |' "$root/README.md" | sed 's/^| HAL ABI \(.*\) |$/\1/')
if [ "$named" != "$major.$minor" ]; then
  echo "FAIL: README.md's parts table says HAL ABI '${named:-(none)}', hal.h defines $major.$minor"
  exit 1
fi
echo "ok: README.md and hal.h both say HAL ABI $major.$minor"
