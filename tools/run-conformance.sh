#!/usr/bin/env bash
# The HAL conformance table (what a vendor runs on its plugin): build, then
# run the conformance suite over every plugin the build produced (the
# reference vendors and the vendor skeleton), with one rank and, for plugins
# that do collectives across ranks, with 2 and 4 ranks as real processes.
# Ends with a summary table, then shows sigmarun keeping a small synthetic
# job alive on the sim vendor: a device heating toward failure is migrated
# away before it dies and a killed worker is replaced from the memory tier.
# Exits non-zero on a failure.
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
sigma_ensure_packages
sigma_build default

bin=build/default/bin/sigma-hal-conformance
plugins_dir=build/default/lib/sigma/plugins
reports=build/default/conformance
mkdir -p "$reports"
rows=()
status=0
for so in "$plugins_dir"/libsigma_hal_*.so; do
  name=$(basename "$so" .so)
  name=${name#libsigma_hal_}
  for ranks in 1 2 4; do
    rc=0
    line=$("$bin" --plugin "$so" --ranks "$ranks" --json "$reports/$name-x$ranks.json" --quiet) || rc=$?
    # A plugin that does not do multi-rank collectives is checked with 1 rank only.
    if [ "$ranks" -gt 1 ] && grep -q 'world size 1 only' "$reports/$name-x$ranks.json" 2>/dev/null; then
      rm -f "$reports/$name-x$ranks.json"
      break
    fi
    case $rc in
      0) verdict=PASS ;;
      77) verdict="SKIPPED (no device)" ;;
      *) verdict=FAIL; status=1 ;;
    esac
    counts=$(echo "$line" | sed -n 's/.*: \([0-9]*\) passed, \([0-9]*\) failed, \([0-9]*\) skipped.*/\1 \2 \3/p')
    rows+=("$name $ranks ${counts:-? ? ?} $verdict")
  done
done

echo
echo "HAL conformance summary (reports in $reports/)"
printf '%-12s %5s %7s %7s %8s  %s\n' plugin ranks passed failed skipped verdict
printf '%-12s %5s %7s %7s %8s  %s\n' ------ ----- ------ ------ ------- -------
for r in "${rows[@]}"; do
  read -r n k p f s v <<< "$r"
  printf '%-12s %5s %7s %7s %8s  %s\n' "$n" "$k" "$p" "$f" "$s" "$v"
done

echo
echo "sigmarun: 3 ranks + 2 spares on the sim vendor's thermal_runaway scenario"
echo "(device 1 overheats and is lost at 2.5 s), and the worker on device 0 killed at step 250"
job=build/default/sigmarun-demo
rm -rf "$job"
build/default/bin/sigmarun --nproc 3 --spares 2 --vendor sim --health-time-scale 40 \
  --vendor-options "scenario=$PWD/samples/scenarios/thermal_runaway.yaml;rank={device};time_scale=40" \
  --job-dir "$job" --no-progress -- \
  build/default/bin/runtime_worker --steps 400 --step-ms 5 --kill-at 250 --kill-device 0 || status=1
exit $status
