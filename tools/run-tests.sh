#!/usr/bin/env bash
# Every test: the Release build's suite, then the same suite under ASan+UBSan
# and under ThreadSanitizer. Fails when any test fails.
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
sigma_ensure_packages
for preset in default asan tsan; do
  echo "==== $preset: build"
  sigma_build "$preset"
  echo "==== $preset: test"
  ctest --preset "$preset" -j "$(nproc)"
done
