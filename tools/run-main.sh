#!/usr/bin/env bash
# The main job: a byte-level MoE transformer (samples/moe_trainer, libtorch)
# trained on the King James Bible by 4 workers and 1 spare under sigmarun on
# the sim vendor, through samples/scenarios/early_life.yaml: a crashed
# worker restored from the memory tier, a NaN burst skipped, a corrupt data
# batch's loss spike rolled back, a silently wrong all-reduce caught and its
# device named, a slow link, and a device heating toward failure migrated
# before it dies. A fault-free reference run of the same job comes first
# (kept for later runs while nothing it depends on changed), so the report
# can draw both losses. Ends with the summary and report.html.
# Exits non-zero when the job does not finish.
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
sigma_ensure_packages
sigma_build default

bin=build/default/bin
demo=build/default/demo
mkdir -p "$demo"
# The text: public domain, from Debian's bible-kjv (its `bible` prints it).
[ -s "$demo/kjv.txt" ] || bible gen1:1-rev22:21 > "$demo/kjv.txt"
# One worker thread's GEMM rate (the MFU peak) and the model's own rate on a
# core (the planner's compute rate), measured once for every worker.
gemm=$("$bin/moe_trainer" --measure-gemm)
model=$("$bin/moe_trainer" --measure-model)
steps=${SIGMA_DEMO_STEPS:-450}
trainer=("$bin/moe_trainer" --data "$PWD/$demo/kjv.txt" --steps "$steps" --gemm-gflops "$gemm" --model-gflops "$model"
         --guardrails "$PWD/samples/moe_trainer/guardrails.yaml")
run=(--nproc 4 --spares 1 --snapshot-keep 4 --readmit-crashed 1 --checkpoint-every 50 --checkpoint-async)

# The fault-free reference: the same job on the cpu vendor, no faults.
reference=$demo/reference
key=$(cat "$bin/moe_trainer" samples/moe_trainer/guardrails.yaml | sha256sum | cut -c1-16)-$steps
if [ "$(cat "$reference/key" 2>/dev/null)" != "$key" ] || [ ! -s "$reference/report.json" ]; then
  echo "== 1/2: the fault-free reference run ($steps steps; kept for the next runs)"
  rm -rf "$reference"
  "$bin/sigmarun" "${run[@]}" --job-dir "$reference" --no-report -- "${trainer[@]}"
  echo "$key" > "$reference/key"
else
  echo "== 1/2: the fault-free reference run: kept from an earlier run ($reference)"
fi

echo
echo "== 2/2: the same job through an early-life cluster (samples/scenarios/early_life.yaml)"
job=$demo/early-life
rm -rf "$job"
status=0
"$bin/sigmarun" "${run[@]}" --vendor sim \
  --vendor-options "scenario=$PWD/samples/scenarios/early_life.yaml;rank={device}" \
  --job-dir "$job" --report-reference "$reference" -- \
  "${trainer[@]}" --poison-batches 60 || status=$?
echo
echo "Open $job/report.html for the charts; the HAL conformance table is tools/run-conformance.sh."
exit $status
