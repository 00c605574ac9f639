#!/usr/bin/python3
"""The planner's cost model against published training runs: in sample, and
each run left out of the fit.

    published_runs.py LIBSIGMA CSV [--markdown]

Every row of data/published-training-runs.csv becomes a request to the
planner (libsigma's C API, sigma_plan): the row's model and devices, its
layout pinned where the row gives it (what it leaves out -- micro-batch,
virtual stages, sometimes recompute -- the planner picks, as the run's
authors tuned it), and what its framework does. The predicted MFU is
compared with the reported figure in one convention: model FLOPs without
recompute, attention counted (PaLM's MFU).

The model's constants that are chosen to fit (FITTED) are fitted to every
row (in sample), and again for each row with that row left out, which then
predicts it (leave-one-out). What is not fitted is what the rows and their
sources say, listed per row in FACTS, and what each accelerator is
(ACCELERATORS).

Exits 1 unless every published layout lies inside the planner's search
space and fits its memory model, the planner's own best is never slower
than the published layout, the leave-one-out mean absolute relative error
is <= 10.5 % and no row's is over 25 %. The goals are 7 % and 20 %; the
test prints whether they are met (they are not yet: docs/parallel.md says
by how much and why), and the bounds it enforces keep the model from
getting worse than it is.
"""
import csv
import ctypes
import json
import math
import sys

# What the table does not hold, per row, each from the row's source or the
# model's released config: vocabulary; a gated FFN (SwiGLU / GeGLU);
# attention and FFN side by side (PaLM, MegaScale); FlashAttention (2022 on;
# memory only); unequal stages (Llama 3: "one layer fewer" on the first and
# last of 16 stages; DeepSeek-V3's 61 layers and its MTP module on 16);
# FSDP keeping the gathered weights from forward to backward (Llama 3: "we
# do not reshard after forward"); the MoE shape (routed expert width,
# shared experts, leading dense layers, node-limited routing, MTP, MLA,
# head width); FP8 GEMMs; and the framework's MoE settings (parallel
# folding, all-to-all overlap, DualPipe, communication SMs, AdamW moments).
FACTS = {
    "megatron21-145b": dict(vocab=51200),
    "megatron21-530b": dict(vocab=51200),
    "korthikanti-530b-2240": dict(vocab=51200),
    # MegaScale Sec 3.2: pipeline sends and receives overlapped.
    "megascale-175b-12288": dict(flash_attention=True, vocab=64000, parallel_block=True, p2p_overlap=True),
    # Llama 3 Sec 3.3.2: asynchronous point-to-point sends.
    "llama3-405b-8k-8192": dict(uneven_stages=True, flash_attention=True, vocab=128256, gated_ffn=True,
                                reshard_after_forward=False, p2p_overlap=True),
    "llama3-405b-8k-16384": dict(uneven_stages=True, flash_attention=True, vocab=128256, gated_ffn=True,
                                 reshard_after_forward=False, p2p_overlap=True),
    "palm-540b": dict(vocab=256000, gated_ffn=True, parallel_block=True),
    "mtnlg-530b-2240": dict(vocab=50257),
    "bloom-176b": dict(vocab=250880),
    "opt-175b": dict(vocab=50272),
    "glm-130b": dict(vocab=150528, gated_ffn=True),
    # Parallel Folding paper: "ETP=1", i.e. folded. Megatron-Core overlaps
    # pipeline sends when stages interleave (Megatron-LM's default;
    # --no-overlap-p2p-communication turns it off): every Megatron-Core row.
    "mixtral-8x22b-128": dict(flash_attention=True, vocab=32768, gated_ffn=True, moe_folding=True,
                              p2p_overlap=True),
    # DeepSeek-V3 report Sec 3.2-3.3, 4.2 and config_671B.json; Sec 3.2.2:
    # a token goes over InfiniBand once to each target node, then NVLink.
    "deepseek-v3-2048": dict(
        flash_attention=True, vocab=129280, gated_ffn=True, expert_ffn=2048, shared_experts=1, dense_layers=3,
        max_nodes=4, mtp_depth=1, mla=dict(q_lora=1536, kv_lora=512, qk_nope=128, qk_rope=64, v_head=128),
        fp8=True, schedule="dualpipe", comm_sm_share=20 / 132, adam_bytes=4 + 2 + 2, uneven_stages=True,
        node_dispatch=True),
    # Qwen3-235B-A22B config.json; Megatron-Bridge's H100 FP8 recipe:
    # expert parallelism 32 over 16 data-parallel ranks (folded),
    # moe_a2a_overlap, no recompute; 94 layers on 8 x 4 virtual stages.
    "qwen3-235b-a22b-256": dict(flash_attention=True, vocab=151936, gated_ffn=True, head_dim=128, fp8=True,
                                moe_folding=True, ep_overlap=True, uneven_stages=True, p2p_overlap=True),
    # Qwen3-30B-A3B config.json. The recipe as published later dispatches
    # through HybridEP; the release's own dispatcher is not stated, so the
    # plain all-to-all is priced.
    "qwen3-30b-a3b-16": dict(flash_attention=True, vocab=151936, gated_ffn=True, head_dim=128, fp8=True),
    # Qwen2-57B-A14B config.json (shared expert 20480 wide); folded.
    "qwen2-57b-a14b-64": dict(flash_attention=True, vocab=151936, gated_ffn=True, shared_experts=1,
                              shared_ffn=20480, moe_folding=True, p2p_overlap=True),
    "mixtral-8x22b-g8t8-128": dict(flash_attention=True, vocab=32768, gated_ffn=True, moe_folding=True,
                                   p2p_overlap=True),
}

MODEL_FACTS = ("vocab", "gated_ffn", "parallel_block", "head_dim", "expert_ffn", "shared_experts", "shared_ffn",
               "dense_layers", "max_nodes", "mtp_depth", "mla", "fp8")
FRAMEWORK_FACTS = ("flash_attention", "uneven_stages", "reshard_after_forward", "moe_folding", "ep_overlap",
                   "p2p_overlap", "node_dispatch",
                   "schedule", "comm_sm_share", "adam_bytes")

# What each accelerator is: memory, the devices a node's links join, their
# bandwidth per device and direction (GB/s). H800 is H100 SXM's compute
# with NVLink cut to the 160 GB/s DeepSeek-V3's report measures.
ACCELERATORS = {
    "A100-80": dict(memory_gib=80, per_node=8, intra_gbps=300, family="A100"),
    "A100-40": dict(memory_gib=40, per_node=8, intra_gbps=300, family="A100"),
    "H100": dict(memory_gib=80, per_node=8, intra_gbps=450, family="H100"),
    "H800": dict(memory_gib=80, per_node=8, intra_gbps=160, family="H100"),
    # A TPU v4 pod is one ICI torus of 3,072 chips; pods meet over the DCN.
    "TPUv4": dict(memory_gib=32, per_node=3072, intra_gbps=100, inter_gbps=12.5, family="TPUv4"),
}

# The constants chosen to fit: name, prior (where every fit starts), grid.
# One value for every row (the GEMM rate: one per accelerator generation, as
# a fraction of its peak). A row whose generation has no other row takes,
# when left out, the mean fraction of the generations that remain.
FITTED = {
    "gemm.A100": (0.70, [x / 100 for x in range(50, 96)]),
    "gemm.H100": (0.62, [x / 100 for x in range(40, 96)]),
    "gemm.TPUv4": (0.85, [x / 100 for x in range(50, 96)]),
    # Held at its prior (NCCL's published bus bandwidths reach 70-80 % of a
    # link's nominal rate): among these rows only Qwen3-235B's step is
    # mostly network, so no fit without it can say anything about the link.
    "link": (0.70, [0.70]),
    "expert_width": (0.0, [float(x) for x in range(0, 2049, 64)]),
    "dp_overlap.fsdp": (0.80, [x / 10 for x in range(0, 11)]),
    "dp_overlap.other": (0.50, [x / 10 for x in range(0, 11)]),
}
# Fixed, not fitted: the non-GEMM share only scales the GEMM rates on these
# rows (every row is priced at the GEMM rate), so it is held at its prior.
NON_GEMM = 0.12
MEMORY_USABLE = 0.90  # the library's default, not given in the requests


class Planner:
    """sigma_plan through ctypes: a request (a dict, written as JSON, which
    is YAML) in, the plans out."""

    def __init__(self, library):
        self.lib = ctypes.CDLL(library)
        self.lib.sigma_plan.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_uint32,
                                        ctypes.POINTER(ctypes.c_void_p)]
        self.lib.sigma_free.argtypes = [ctypes.c_void_p]
        self.cache = {}

    def plan(self, req):
        text = json.dumps(req, sort_keys=True)
        if text not in self.cache:
            out = ctypes.c_void_p()
            status = self.lib.sigma_plan(text.encode(), req["model"]["name"].encode(), 1, ctypes.byref(out))
            if status != 0:
                raise SystemExit(f"sigma_plan failed ({status}) on {req['model']['name']}")
            answer = json.loads(ctypes.string_at(out.value).decode())
            self.lib.sigma_free(out)
            self.cache[text] = (answer["plans"][0] if answer["plans"] else None, answer["model_flops_per_token"])
        return self.cache[text]


def accelerator(row):
    a = row["accelerator"]
    if "TPU" in a:
        return "TPUv4"
    if "H800" in a:
        return "H800"
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
    if "400 Gb/s" in text or "50 GB/s" in text:
        return 50.0
    return 25.0  # 8 x 200 Gb/s per 8-GPU node (HDR IB, RoCE), the A100 clusters' norm


def number(text, default=None):
    try:
        return float(text)
    except ValueError:
        return default


def overlap_class(row):
    sharding = row["dp_sharding"].lower()
    if "fsdp" in sharding or "fully sharded" in sharding:
        return "fsdp"
    if sharding.startswith("none") or "no grad all-reduce overlap" in sharding:
        return None  # no overlap: DDP without it, or the source says so
    return "other"


def framework(row, constants):
    text = (row["dp_sharding"] + " " + row["notes"] + " " + row["flops_convention"] + " " + row["source"]).lower()
    deepspeed = "deepspeed" in text
    facts = FACTS[row["id"]]
    cls = overlap_class(row)
    out = dict(
        dp_overlap=constants["dp_overlap." + cls] if cls else 0.0,
        # DeepSpeed's pipeline engine: blocking sends of whole activations,
        # no interleaving, stages partitioned unevenly.
        blocking_p2p=deepspeed,
        interleaving=not deepspeed,
        uneven_stages=deepspeed,
        flash_attention=False,
    )
    out.update({k: facts[k] for k in FRAMEWORK_FACTS if k in facts})
    return out


def recompute(row):
    r = row["act_recompute"].lower()
    if r.startswith("full") or r.startswith("yes") or "remat" in r:
        return ["full"]
    if r.startswith("selective"):
        return ["selective"]
    if r.startswith("none"):
        return ["none"]
    return []  # not stated, or partial in a way the three choices do not name: the planner picks


def sharding(row):
    s = row["dp_sharding"].lower()
    if "fsdp" in s or "fully sharded" in s:
        return ["full"]
    if s.startswith("none"):
        return ["none"]
    if "zero" in s or "distributed optimizer" in s:
        return ["optimizer"]
    return []


def request(row, constants, pinned):
    facts = FACTS[row["id"]]
    acc = accelerator(row)
    model = dict(
        name=row["id"],
        layers=int(row["layers"]),
        hidden=int(row["hidden"]),
        ffn=int(row["ffn"]),
        heads=int(row["heads"]),
        kv_heads=int(row["kv_heads"]),
        experts=int(number(row["experts"], 1)),
        top_k=int(number(row["topk"], 1)),
        seq=int(row["seq_len"]),
        global_batch=int(row["global_batch_seqs"]),
    )
    model.update({k: facts[k] for k in MODEL_FACTS if k in facts})
    a = ACCELERATORS[acc]
    peak = float(row["peak_tflops_per_accel_in_denominator"])
    devices = dict(count=int(row["num_accel"]), per_node=a["per_node"], memory_gib=a["memory_gib"],
                   intra_gbps=a["intra_gbps"], inter_gbps=a.get("inter_gbps", inter_gbps(row, acc)),
                   peak_tflops=peak, gemm_tflops=constants["gemm." + a["family"]] * peak)
    search = {"top": 1}
    if pinned:
        # Priced even where the memory model says it does not fit (the test
        # then fails on it); layouts that fit come first.
        search["require_fit"] = False
        for key in ("TP", "PP", "EP", "CP"):
            v = number(row[key])
            if v is not None:
                search[key.lower()] = int(v)
        search.setdefault("ep", 1)
        search.setdefault("cp", 1)
        for key, name in (("VPP", "vpp"), ("micro_batch", "micro_batch")):
            if number(row[key]) is not None:
                search[name] = int(number(row[key]))
        if recompute(row):
            search["recompute"] = recompute(row)
        if sharding(row):
            search["sharding"] = sharding(row)
    return dict(model=model, devices=devices, framework=framework(row, constants),
                efficiency=dict(link=constants["link"], expert_width=constants["expert_width"],
                                         non_gemm=NON_GEMM), search=search)


def target_mfu(row, flops_per_token):
    """The reported figure as PaLM-style MFU (percent), and how it was converted."""
    if number(row["reported_mfu_pct"]) is not None:
        return number(row["reported_mfu_pct"]), "reported MFU"
    h, l, s = int(row["hidden"]), int(row["layers"]), int(row["seq_len"])
    v = FACTS[row["id"]]["vocab"]
    peak = float(row["peak_tflops_per_accel_in_denominator"])
    if row["id"].startswith("megatron21"):
        # Megatron's eq. 3 counts the recompute forward: 96 Bslh^2 (1 + s/6h)
        # + 6 BshV against the model's 72 Bslh^2 (1 + s/6h) + 6 BshV.
        base = 1 + s / (6 * h)
        ratio = (72 * base + 6 * v / (l * h)) / (96 * base + 6 * v / (l * h))
        return number(row["reported_hfu_pct"]) * ratio, "HFU x model/hardware FLOPs (eq. 3)"
    if row["id"].startswith("bloom"):
        return number(row["reported_tflops_per_accel"]) * 6 / 8 / 312 * 100, "TFLOP/s x 6/8 (4x2 coefficient) / 312"
    if number(row["reported_tflops_per_accel"]) is not None:
        return number(row["reported_tflops_per_accel"]) / peak * 100, "TFLOP/s / peak (method not stated)"
    per_device = float(row["reported_tokens_per_s"]) / int(row["num_accel"])
    return per_device * flops_per_token / (peak * 1e12) * 100, "tokens/s x model FLOPs / peak"


class Rows:
    """Each row's reported MFU and the planner's prediction for constants."""

    def __init__(self, planner, rows):
        self.planner = planner
        self.rows = rows

    def published(self, row, constants):
        return self.planner.plan(request(row, constants, pinned=True))

    def error(self, row, constants):
        plan, flops = self.published(row, constants)
        if plan is None:
            return None
        target, _ = target_mfu(row, flops)
        return (100 * plan["mfu"] - target) / target

    def mean_error(self, rows, constants):
        errors = [self.error(r, constants) for r in rows]
        if None in errors:  # a published layout outside the space: no fit can price it
            return math.inf
        return sum(abs(e) for e in errors) / len(errors)


def fit(rows_model, rows, start):
    """Coordinate descent over FITTED's grids, minimising the mean absolute
    relative error over `rows`. A generation no row runs on takes the mean
    of the others' GEMM fractions."""
    constants = dict(start)
    families = {ACCELERATORS[accelerator(r)]["family"] for r in rows}
    classes = {overlap_class(r) for r in rows}
    free = [k for k in FITTED if not (k.startswith("gemm.") and k[5:] not in families)
            and not (k.startswith("dp_overlap.") and k[11:] not in classes)]
    best = rows_model.mean_error(rows, constants)
    for _ in range(8):
        moved = False
        for key in free:
            for value in FITTED[key][1]:
                trial = dict(constants, **{key: value})
                e = rows_model.mean_error(rows, trial)
                if e < best - 1e-12:
                    best, constants, moved = e, trial, True
        if not moved:
            break
    known = [constants["gemm." + f] for f in sorted(families)]
    for key in FITTED:
        if key.startswith("gemm.") and key[5:] not in families:
            constants[key] = sum(known) / len(known)
    return constants, best


def layout(p):
    l = p["layout"]
    return (f"tp{l['tp']} pp{l['pp']} dp{l['dp']} ep{l['ep']} cp{l['cp']} v{l['vpp']} mb{l['micro_batch']} "
            f"{l['recompute']}/{l['sharding']}")


def main():
    library, path = sys.argv[1], sys.argv[2]
    markdown = "--markdown" in sys.argv
    rows = list(csv.DictReader(open(path, newline="")))
    missing = [r["id"] for r in rows if r["id"] not in FACTS]
    if missing:
        raise SystemExit(f"rows without FACTS: {missing}")
    model = Rows(Planner(library), rows)
    start = {k: v[0] for k, v in FITTED.items()}
    fitted, in_sample = fit(model, rows, start)

    failures, over_goal, lines = [], [], []
    loo = {}
    for row in rows:
        others = [r for r in rows if r is not row]
        constants, _ = fit(model, others, start)  # from the priors: nothing of the row left out
        loo[row["id"]] = model.error(row, constants)
        if loo[row["id"]] is None:
            raise SystemExit(f"{row['id']}: the published layout is outside the planner's space")
    for row in rows:
        pub, flops = model.published(row, fitted)
        if pub is None:
            failures.append(f"{row['id']}: the published layout is outside the planner's space")
            continue
        if not pub["fits"]:
            failures.append(f"{row['id']}: the memory model puts the published layout at {pub['memory_gib']:.0f} GiB "
                            f"per device, over the usable "
                            f"{MEMORY_USABLE * ACCELERATORS[accelerator(row)]['memory_gib']:.0f}")
        best, _ = model.planner.plan(request(row, fitted, pinned=False))
        if best is None:
            failures.append(f"{row['id']}: nothing in the open space fits")
            continue
        target, how = target_mfu(row, flops)
        err = model.error(row, fitted)
        gain = pub["step_s"] / best["step_s"] - 1
        if gain < -1e-9:
            failures.append(f"{row['id']}: the planner's best is slower than the published layout")
        if abs(loo[row["id"]]) > 0.25:
            failures.append(f"{row['id']}: leave-one-out error {100 * loo[row['id']]:+.1f} % is worse than 25 %")
        elif abs(loo[row["id"]]) > 0.20:
            over_goal.append(f"{row['id']}: leave-one-out error {100 * loo[row['id']]:+.1f} % (goal 20 %)")
        lines.append((row["id"], layout(pub), target, how, 100 * pub["mfu"], 100 * err, 100 * loo[row["id"]],
                      pub["memory_gib"], layout(best), 100 * best["mfu"], 100 * gain))
    loo_mean = 100 * sum(abs(e) for e in loo.values()) / len(loo)
    if markdown:
        print("| run | published layout (planner's picks for what it leaves out) | reported MFU % | predicted % "
              "| error | left out | GiB | planner's best layout | its MFU % | gain |")
        print("|---|---|---:|---:|---:|---:|---:|---|---:|---:|")
        for r in lines:
            print(f"| {r[0]} | {r[1]} | {r[2]:.1f} | {r[4]:.1f} | {r[5]:+.1f} % | {r[6]:+.1f} % | {r[7]:.0f} "
                  f"| {r[8]} | {r[9]:.1f} | {r[10]:+.1f} % |")
    else:
        for r in lines:
            print(f"{r[0]:24s} {r[1]:42s} reported {r[2]:5.1f} ({r[3]}) predicted {r[4]:5.1f} "
                  f"error {r[5]:+6.1f} % left out {r[6]:+6.1f} % {r[7]:4.0f} GiB | "
                  f"best {r[8]} {r[9]:5.1f} gain {r[10]:+5.1f} %")
    print(f"\nfitted constants: " + ", ".join(f"{k} {v:.2f}" for k, v in fitted.items()) +
          f"; fixed: non_gemm {NON_GEMM}")
    print(f"mean absolute relative error of MFU over {len(rows)} runs: in sample {100 * in_sample:.1f} % "
          f"(worst {max(abs(l[5]) for l in lines):.1f} %); leave-one-out {loo_mean:.1f} % "
          f"(worst {100 * max(abs(e) for e in loo.values()):.1f} %)")
    print(f"goals: leave-one-out mean <= 7 %: {'met' if loo_mean <= 7 else 'NOT met'}; "
          f"no row over 20 %: {'met' if not over_goal else 'NOT met'}")
    if loo_mean > 10.5:
        failures.append(f"leave-one-out mean absolute relative error {loo_mean:.1f} % > 10.5 %")
    for o in over_goal:
        print("over the per-row goal:", o)
    for f in failures:
        print("FAIL:", f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
