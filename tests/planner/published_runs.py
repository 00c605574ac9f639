#!/usr/bin/python3
"""sigma-plan against published training runs.

    published_runs.py SIGMA_PLAN CSV [--markdown]

Every row of data/published-training-runs.csv becomes a request to
sigma-plan: the row's model and devices, its layout pinned where the row
gives it (what it leaves out -- micro-batch, virtual stages, sometimes
recompute -- the planner picks, as the run's authors tuned it), and what
its framework does, read from the row's text. The predicted MFU is compared
with the reported figure converted to one convention: model FLOPs without
recompute, attention counted (PaLM's MFU). Then the same model and devices
are planned with the whole space open, and the gain over the published
layout is reported.

Exits 1 unless the mean absolute relative error is <= 10 % and no row is
worse than 25 %, every published layout lies inside the planner's search
space, and the planner's own best is never slower than the published
layout. A published layout that does not fit the planner's memory model is
reported (a note with its GiB per device against the usable memory), not
failed: the memory model is conservative, and three of the twelve rows do
not fit it today.
"""
import csv
import json
import math
import subprocess
import sys
import tempfile

# What the table does not hold, per row: vocabulary size (from each model's
# paper or released tokenizer), whether the FFN is gated (SwiGLU / GeGLU),
# whether attention and FFN run side by side (PaLM, MegaScale), whether the
# run's attention kept no score matrix (FlashAttention, 2022 on: memory only),
# whether its pipeline stages hold unequal layer counts (Llama 3: 126 layers
# on 16 stages, the first and last one layer fewer).
FACTS = {
    "megatron21-145b": dict(vocab=51200),
    "megatron21-530b": dict(vocab=51200),
    "korthikanti-530b-2240": dict(vocab=51200),
    "megascale-175b-12288": dict(flash_attention=True, vocab=64000, parallel_block=True),
    "llama3-405b-8k-8192": dict(uneven_stages=True, flash_attention=True, vocab=128256, gated_ffn=True),
    "llama3-405b-8k-16384": dict(uneven_stages=True, flash_attention=True, vocab=128256, gated_ffn=True),
    "palm-540b": dict(vocab=256000, gated_ffn=True, parallel_block=True),
    "mtnlg-530b-2240": dict(vocab=50257),
    "bloom-176b": dict(vocab=250880),
    "opt-175b": dict(vocab=50272),
    "glm-130b": dict(vocab=150528, gated_ffn=True),
    "mixtral-8x22b-128": dict(flash_attention=True, vocab=32768, gated_ffn=True),
}

# Accelerators: memory, what a node joins, the measured large-GEMM rate
# (bf16/fp16 dense; one value per accelerator, never per row), links.
ACCELERATORS = {
    "A100-80": dict(memory_gib=80, per_node=8, gemm_tflops=218, intra_gbps=300),
    "A100-40": dict(memory_gib=40, per_node=8, gemm_tflops=218, intra_gbps=300),
    "H100": dict(memory_gib=80, per_node=8, gemm_tflops=613, intra_gbps=450),
    # A TPU v4 pod is one ICI torus of 3,072 chips; pods meet over the DCN.
    "TPUv4": dict(memory_gib=32, per_node=3072, gemm_tflops=234, intra_gbps=100, inter_gbps=12.5),
}


def accelerator(row):
    a = row["accelerator"]
    if "TPU" in a:
        return "TPUv4"
    if "H100" in a:
        return "H100"
    return "A100-40" if "40GB" in a else "A100-80"


def inter_gbps(row, acc):
    """GB/s per device between nodes, from the row's interconnect."""
    if acc == "TPUv4":
        return ACCELERATORS[acc]["inter_gbps"]
    text = row["inter_node_interconnect"]
    if "Omni-Path" in text:
        return 4 * 100 / 8 / 8  # 4 x 100 Gb/s per 8-GPU node
    if "400 Gb/s" in text:
        return 50.0
    return 25.0  # 8 x 200 Gb/s per 8-GPU node (HDR IB, RoCE), the A100 clusters' norm


def number(text, default=None):
    try:
        return float(text)
    except ValueError:
        return default


def framework(row):
    text = (row["dp_sharding"] + " " + row["notes"] + " " + row["flops_convention"] + " " + row["source"]).lower()
    sharding = row["dp_sharding"].lower()
    deepspeed = "deepspeed" in text
    if "fsdp" in sharding or "fully sharded" in sharding:
        overlap = 0.8
    elif sharding.startswith("none") or "no grad all-reduce overlap" in sharding:
        overlap = 0.0
    else:
        overlap = 0.5
    return dict(
        dp_overlap=overlap,
        # DeepSpeed's pipeline engine: blocking sends of whole activations,
        # no interleaving, stages partitioned unevenly.
        blocking_p2p=deepspeed,
        interleaving=not deepspeed,
        uneven_stages=deepspeed or FACTS[row["id"]].get("uneven_stages", False),
        flash_attention=FACTS[row["id"]].get("flash_attention", False),
    )


def recompute(row):
    r = row["act_recompute"].lower()
    if r.startswith("full") or r.startswith("yes") or "remat" in r:
        return ["full"]
    if r.startswith("selective"):
        return ["selective"]
    if r.startswith("none"):
        return ["none"]
    return []  # not stated: the planner picks


def sharding(row):
    s = row["dp_sharding"].lower()
    if "fsdp" in s or "fully sharded" in s:
        return ["full"]
    if s.startswith("none"):
        return ["none"]
    if "zero" in s or "distributed optimizer" in s:
        return ["optimizer"]
    return []


def request(row, pinned):
    facts = FACTS[row["id"]]
    acc = accelerator(row)
    hidden = int(row["hidden"])
    model = dict(
        name=row["id"],
        layers=int(row["layers"]),
        hidden=hidden,
        ffn=int(row["ffn"]),
        heads=int(row["heads"]),
        kv_heads=int(row["kv_heads"]),
        vocab=facts["vocab"],
        experts=int(number(row["experts"], 1)),
        top_k=int(number(row["topk"], 1)),
        seq=int(row["seq_len"]),
        global_batch=int(row["global_batch_seqs"]),
        gated_ffn=facts.get("gated_ffn", False),
        parallel_block=facts.get("parallel_block", False),
    )
    devices = dict(ACCELERATORS[acc])
    devices.setdefault("inter_gbps", inter_gbps(row, acc))
    devices.update(count=int(row["num_accel"]), peak_tflops=float(row["peak_tflops_per_accel_in_denominator"]))
    search = {"top": 1}
    if pinned:
        # The run ran: price its layout even where the memory model,
        # which is conservative, says it would not fit (reported).
        search["require_fit"] = False
        for key in ("TP", "PP", "EP", "CP"):
            v = number(row[key])
            if v is not None:
                search[key.lower()] = int(v)
        if "ep" not in search:
            search["ep"] = 1
        if "cp" not in search:
            search["cp"] = 1
        if number(row["VPP"]) is not None:
            search["vpp"] = int(number(row["VPP"]))
        if number(row["micro_batch"]) is not None:
            search["micro_batch"] = int(number(row["micro_batch"]))
        if recompute(row):
            search["recompute"] = recompute(row)
        if sharding(row):
            search["sharding"] = sharding(row)
    return dict(model=model, devices=devices, framework=framework(row), search=search)


def plan(sigma_plan, req):
    with tempfile.NamedTemporaryFile("w", suffix=".yaml") as f:
        json.dump(req, f)  # JSON is YAML
        f.flush()
        out = subprocess.run([sigma_plan, f.name, "--json"], capture_output=True, text=True)
    if out.returncode not in (0, 1):
        raise SystemExit(f"sigma-plan failed on {req['model']['name']}: {out.stderr}")
    plans = json.loads(out.stdout)["plans"]
    return plans[0] if plans else None


def target_mfu(row):
    """The reported figure as PaLM-style MFU (percent), and how it was converted."""
    if number(row["reported_mfu_pct"]) is not None:
        return number(row["reported_mfu_pct"]), "reported MFU"
    h, l, s = int(row["hidden"]), int(row["layers"]), int(row["seq_len"])
    v = FACTS[row["id"]]["vocab"]
    if row["id"].startswith("megatron21"):
        # Megatron's eq. 3 counts the recompute forward: 96 Bslh^2 (1 + s/6h)
        # + 6 BshV against the model's 72 Bslh^2 (1 + s/6h) + 6 BshV.
        base = 1 + s / (6 * h)
        ratio = (72 * base + 6 * v / (l * h)) / (96 * base + 6 * v / (l * h))
        return number(row["reported_hfu_pct"]) * ratio, "HFU x model/hardware FLOPs (eq. 3)"
    if row["id"].startswith("bloom"):
        return number(row["reported_tflops_per_accel"]) * 6 / 8 / 312 * 100, "TFLOP/s x 6/8 (4x2 coefficient) / 312"
    return number(row["reported_tflops_per_accel"]) / float(row["peak_tflops_per_accel_in_denominator"]) * 100, \
        "TFLOP/s / peak (method not stated)"


def layout(p):
    l = p["layout"]
    return (f"tp{l['tp']} pp{l['pp']} dp{l['dp']} ep{l['ep']} cp{l['cp']} v{l['vpp']} mb{l['micro_batch']} "
            f"{l['recompute']}/{l['sharding']}")


def main():
    sigma_plan, path = sys.argv[1], sys.argv[2]
    markdown = "--markdown" in sys.argv
    rows = list(csv.DictReader(open(path)))
    errors, failures, lines, notes = [], [], [], []
    for row in rows:
        tgt, how = target_mfu(row)
        pub = plan(sigma_plan, request(row, pinned=True))
        if pub is None:
            failures.append(f"{row['id']}: the published layout is outside the planner's space")
            continue
        if not pub["fits"]:
            notes.append(f"{row['id']}: the memory model puts the published layout at {pub['memory_gib']:.0f} GiB "
                         f"per device, over the usable {0.9 * ACCELERATORS[accelerator(row)]['memory_gib']:.0f}")
        best = plan(sigma_plan, request(row, pinned=False))
        pred = 100 * pub["mfu"]
        err = (pred - tgt) / tgt
        errors.append(abs(err))
        if abs(err) > 0.25:
            failures.append(f"{row['id']}: error {100 * err:+.1f} % is worse than 25 %")
        gain = pub["step_s"] / best["step_s"] - 1
        if gain < -1e-9:
            failures.append(f"{row['id']}: the planner's best is slower than the published layout")
        lines.append((row["id"], layout(pub), tgt, how, pred, 100 * err, layout(best), 100 * best["mfu"], 100 * gain))
    if markdown:
        print("| run | published layout (planner's picks for what it leaves out) | reported MFU % | predicted % "
              "| error | planner's best layout | its MFU % | gain |")
        print("|---|---|---:|---:|---:|---|---:|---:|")
        for r in lines:
            print(f"| {r[0]} | {r[1]} | {r[2]:.1f} | {r[4]:.1f} | {r[5]:+.1f} % | {r[6]} | {r[7]:.1f} | {r[8]:+.1f} % |")
    else:
        for r in lines:
            print(f"{r[0]:24s} {r[1]:40s} reported {r[2]:5.1f} ({r[3]}) predicted {r[4]:5.1f} error {r[5]:+6.1f} % | "
                  f"best {r[6]} {r[7]:5.1f} gain {r[8]:+5.1f} %")
    mape = 100 * sum(errors) / max(1, len(errors))
    print(f"\nmean absolute relative error of MFU: {mape:.1f} % over {len(errors)} runs; "
          f"worst {100 * max(errors, default=0):.1f} %")
    if mape > 10:
        failures.append(f"mean absolute relative error {mape:.1f} % > 10 %")
    for n in notes:
        print("note:", n)
    for f in failures:
        print("FAIL:", f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
