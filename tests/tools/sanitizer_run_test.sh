#!/usr/bin/env bash
# sanitizer_run.sh decides as its header says: a report fails, the tracer's
# known crash alone is run again, and a run that failed a test is never
# run again even when the tracer crashed after it.
set -uo pipefail
run=$(dirname "$0")/sanitizer_run.sh
fail=0
check() {  # NAME WANT_RC WANT_RETRIES SCRIPT
  local out rc retries
  out=$(bash "$run" bash -c "$4" 2>&1)
  rc=$?
  retries=$(grep -c '^sanitizer-retry:' <<<"$out")
  if [ "$rc" -ne "$2" ] || [ "$retries" -ne "$3" ]; then
    echo "FAIL $1: exit $rc (want $2), $retries retries (want $3)"
    printf '%s\n' "$out" | head -20
    fail=1
  else
    echo "ok   $1"
  fi
}
crash='echo "==123==LeakSanitizer has encountered a fatal error."'
check "a passing run" 0 0 'exit 0'
check "a failing run" 3 0 'exit 3'
check "a sanitizer report fails whatever the exit" 1 0 'echo "==1==ERROR: AddressSanitizer: heap-use-after-free"; exit 0'
check "the tracer's crash alone is run again" 1 2 "$crash; exit 1"
check "a failed test then the tracer's crash is not run again" 1 0 "echo '[  FAILED  ] Suite.Case (3 ms)'; $crash; exit 1"
check "a Failure line then the tracer's crash is not run again" 1 0 "echo 'x_test.cpp:10: Failure'; $crash; exit 1"
[ "$fail" -eq 0 ] && echo "6 passed, 0 failed" || exit 1
