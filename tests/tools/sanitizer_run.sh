#!/usr/bin/env bash
# Runs one test command of a sanitizer build (CTest's launcher for the asan,
# tsan and fuzz presets) and decides what its output means:
#
#  - a sanitizer report anywhere in the output fails the test, whatever the
#    exit code (a worker process that reported and died may have been
#    recovered from by the test's job, which must not hide it);
#  - one known crash of the runtime itself, LeakSanitizer's tracer dying at
#    exit on a loaded two-core machine (it prints the fatal-error line below
#    and no report), is the only failure run again: at most twice more, each
#    retry announced on a line starting "sanitizer-retry:", which
#    tools/run-tests.sh counts and prints. A run whose output also shows a
#    failed test (GoogleTest's "[  FAILED  ]" or a "Failure" line) is never
#    run again: it failed before the tracer crashed;
#  - anything else is the command's own exit code.
#
#   sanitizer_run.sh COMMAND [ARGS...]
set -uo pipefail

readonly known_crash='^==[0-9]+==LeakSanitizer has encountered a fatal error\.$'
readonly report='(ERROR|WARNING): (Address|Leak|Thread|UndefinedBehavior|Memory)Sanitizer|runtime error:|^SUMMARY: [A-Za-z]+Sanitizer'
readonly attempts=3
readonly failed_test='^\[  FAILED  \]|: Failure$'

log=$(mktemp)
trap 'rm -f "$log"' EXIT
for attempt in $(seq 1 "$attempts"); do
  "$@" 2>&1 | tee "$log"
  rc=${PIPESTATUS[0]}
  if grep -qE "$report" "$log"; then
    echo "sanitizer_run: a sanitizer report in attempt $attempt of '$*' (exit $rc): failing" >&2
    exit 1
  fi
  if [ "$rc" -eq 0 ] || ! grep -qE "$known_crash" "$log"; then
    exit "$rc"
  fi
  if grep -qE "$failed_test" "$log"; then
    echo "sanitizer_run: '$*' failed a test before LeakSanitizer's tracer crashed (exit $rc): not run again" >&2
    exit "$rc"
  fi
  if [ "$attempt" -lt "$attempts" ]; then
    echo "sanitizer-retry: attempt $attempt of '$*' ended in LeakSanitizer's known tracer crash (exit $rc, no report); running it again"
  fi
done
echo "sanitizer_run: '$*' crashed in LeakSanitizer's tracer $attempts times: failing" >&2
exit "$rc"
