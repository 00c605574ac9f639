#!/usr/bin/env bash
# Every test: the Release build's suite, then the same suite under ASan+UBSan
# and under ThreadSanitizer, then each libFuzzer target for a bounded time
# over its corpus (the checkpoint reader longest). Fails when any test fails
# or any fuzzer finds a crash.
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
# What the tests add to the build's packages (common.sh): the formatters, a
# browser for the report, Prometheus and a single-host Slurm. These tests
# are required here: SIGMA_TEST_REQUIRE_TOOLS makes an absent tool a
# failure, not a skip.
sigma_ensure_packages clang-format clang-tidy prometheus chromium slurm-wlm munge
export SIGMA_TEST_REQUIRE_TOOLS=1

# Every C and C++ file is in .clang-format's style: formatting is the
# tool's, never a reviewer's.
echo "==== format: clang-format --dry-run on every C and C++ file"
if ! git ls-files -z '*.c' '*.h' '*.cpp' '*.hpp' '*.cu' | xargs -0 clang-format --dry-run -Werror; then
  echo "files above are not formatted: run clang-format -i on them" >&2
  exit 1
fi
for preset in default asan tsan; do
  echo "==== $preset: build"
  sigma_build "$preset"
  if [ "$preset" = default ]; then
    # Every part of the Release build is there (the configure requires
    # libtorch and pybind11; this catches a part dropped any other way).
    for part in build/default/bin/moe_trainer build/default/python/sigma/_sigma.*.so; do
      [ -e "$part" ] || { echo "the default build lacks $part: a part was configured out" >&2; exit 1; }
    done
    # .clang-tidy's bug-finding checks over the library's sources, on the
    # Release build's compile commands (a unity batch checked as one unit,
    # its files parsed once); any finding fails the run.
    echo "==== clang-tidy: the library"
    # A batch includes .cpp files by design: bugprone-suspicious-include is
    # off for the batches alone.
    units=$(mktemp)
    tools/tidy_sources.py build/default >"$units"
    tidy=(clang-tidy --config-file=.clang-tidy -p build/default --quiet --extra-arg=-Wno-unknown-warning-option)
    grep -z '/Unity/' "$units" | xargs -0 -r -P "$(nproc)" -n 1 "${tidy[@]}" --checks=-bugprone-suspicious-include
    grep -zv '/Unity/' "$units" | xargs -0 -r -P "$(nproc)" -n 4 "${tidy[@]}"
    rm -f "$units"
  fi
  echo "==== $preset: test"
  ctest --preset "$preset" -j "$(nproc)"
  # Sanitizer builds run each test through tests/tools/sanitizer_run.sh,
  # which runs a test again only after LeakSanitizer's known tracer crash.
  # Every such retry is counted here, so none goes unseen.
  if [ "$preset" != default ]; then
    retries=$(grep -c '^sanitizer-retry:' "build/$preset/Testing/Temporary/LastTest.log" || true)
    echo "==== $preset: ${retries} test run(s) retried after LeakSanitizer's tracer crash"
    grep '^sanitizer-retry:' "build/$preset/Testing/Temporary/LastTest.log" || true
  fi
done

echo "==== fuzz: build (clang + libFuzzer)"
sigma_ensure_packages clang libclang-rt-14-dev
sigma_build fuzz
# name:seconds. Each run starts from a scratch copy of the committed corpus.
for target in checkpoint:60 guardrails:20 scenario:20 cluster_sim:20 loader:30 plan_request:20 agent_protocol:20; do
  name=${target%%:*}
  seconds=${target##*:}
  corpus=$(mktemp -d)
  cp tests/fuzz/corpus/"$name"/* "$corpus"/
  echo "==== fuzz: $name for ${seconds}s"
  log=build/fuzz/fuzz_"$name".log
  if ! ./build/fuzz/bin/fuzz_"$name" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=4096 \
      -artifact_prefix=build/fuzz/ "$corpus" >"$log" 2>&1; then
    tail -40 "$log"
    echo "fuzz_$name found a crash (input saved under build/fuzz/)" >&2
    exit 1
  fi
  grep -E "^Done" "$log" || tail -2 "$log"
  rm -rf "$corpus"
done
