#!/usr/bin/env bash
# The main job: a byte-level MoE transformer (samples/moe_trainer, libtorch)
# trained on the King James Bible by 4 workers and 1 spare under sigmarun on
# the sim vendor, through samples/scenarios/early_life.yaml: a crashed
# worker restored from the memory tier, a NaN burst skipped, a corrupt data
# batch's loss spike rolled back, a silently wrong all-reduce caught and its
# device named, a slow link, and a device heating toward failure migrated
# before it dies. The GEMMs run in f16 with dynamic loss scaling, and layer
# 2's attention logits grow toward f16's range and back (steps 150-270):
# the guardrails escalate that layer to f32 before it overflows and return
# it to f16 when it is calm. Two fault-free runs of the same job come first
# (kept for later runs while nothing they depend on changed): the
# reference, and one with escalation off, so the report can draw all three
# losses. Ends with the summary and report.html.
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
# The job's GEMMs: f16 (its arithmetic on the CPU), layer 2's logits growing.
job_flags=(--precision f16 --logit-growth 2:150:270:1e6)
gemm=$("$bin/moe_trainer" --measure-gemm)
model=$("$bin/moe_trainer" --measure-model "${job_flags[@]}")
steps=${SIGMA_DEMO_STEPS:-450}
trainer=("$bin/moe_trainer" --data "$PWD/$demo/kjv.txt" --steps "$steps" --gemm-gflops "$gemm" --model-gflops "$model"
         "${job_flags[@]}")
guardrails=$PWD/samples/moe_trainer/guardrails.yaml
# The same guardrails with per-layer escalation off.
sed 's/^precision: {enabled: true/precision: {enabled: false/' "$guardrails" > "$demo/guardrails-no-escalation.yaml"
grep -q '^precision: {enabled: false' "$demo/guardrails-no-escalation.yaml" ||
  { echo "run-main: $guardrails no longer starts its precision line with 'enabled: true'" >&2; exit 1; }
run=(--nproc 4 --spares 1 --snapshot-keep 4 --readmit-crashed 1 --checkpoint-every 50 --checkpoint-async)

# A fault-free run on the cpu vendor, kept while the trainer, its
# guardrails, the job's flags and the step count are those it ran with.
fault_free() {  # N FOLDER GUARDRAILS WHAT
  local key
  key=$( (cat "$bin/moe_trainer" "$3"; echo "${job_flags[@]}") | sha256sum | cut -c1-16)-$steps
  if [ "$(cat "$2/key" 2>/dev/null)" != "$key" ] || [ ! -s "$2/report.json" ]; then
    echo "== $1/3: $4 ($steps steps; kept for the next runs)"
    rm -rf "$2"
    "$bin/sigmarun" "${run[@]}" --job-dir "$2" --no-report -- "${trainer[@]}" --guardrails "$3"
    echo "$key" > "$2/key"
  else
    echo "== $1/3: $4: kept from an earlier run ($2)"
  fi
}
reference=$demo/reference
fault_free 1 "$reference" "$guardrails" "the fault-free reference run"
echo
no_escalation=$demo/no-escalation
fault_free 2 "$no_escalation" "$demo/guardrails-no-escalation.yaml" "the fault-free run with escalation off"

echo
echo "== 3/3: the same job through an early-life cluster (samples/scenarios/early_life.yaml)"
job=$demo/early-life
rm -rf "$job"
status=0
"$bin/sigmarun" "${run[@]}" --vendor sim \
  --vendor-options "scenario=$PWD/samples/scenarios/early_life.yaml;rank={device}" \
  --job-dir "$job" --report-reference "$reference" --report-compare "escalation off=$no_escalation" -- \
  "${trainer[@]}" --guardrails "$guardrails" --poison-batches 60 || status=$?
echo
echo "Open $job/report.html for the charts; the HAL conformance table is tools/run-conformance.sh."
exit $status
