// The planner: its search against a brute force over its own cost model,
// the cost model's FLOP count, and its request parser's refusals.
#include <sigma/error.hpp>
#include <sigma/planner.hpp>

#include <gtest/gtest.h>

namespace sigma::planner {
namespace {

Model small_moe() {
  Model m;
  m.name = "small-moe";
  m.layers = 8;
  m.hidden = 1024;
  m.ffn = 2816;
  m.heads = 16;
  m.kv_heads = 4;
  m.vocab = 32000;
  m.experts = 8;
  m.top_k = 2;
  m.seq = 2048;
  m.global_batch = 64;
  m.gated_ffn = true;
  return m;
}

Devices sixteen(double memory_gib) {
  Devices d;
  d.count = 16;
  d.per_node = 8;
  d.memory_gib = memory_gib;
  d.peak_tflops = 312;
  d.gemm_tflops = 218;
  return d;
}

// Every layout there is, no pruning, the shortest step that fits.
Candidate brute_force(const Model& m, const Devices& d, const Framework& f) {
  Candidate best;
  best.score.step_s = 1e300;
  for (uint32_t tp = 1; tp <= 16; ++tp)
    for (uint32_t pp = 1; pp <= 16; ++pp)
      for (uint32_t dp = 1; dp <= 16; ++dp) {
        if (tp * pp * dp != d.count || tp > d.per_node || m.heads % tp || pp > m.layers) continue;
        for (uint32_t ep = 1; ep <= dp; ++ep) {
          if (dp % ep || m.experts % ep) continue;
          for (uint32_t v = 1; v <= 8; ++v) {
            if (v > 1 && (pp == 1 || m.layers < pp * v)) continue;
            if (m.layers % (pp * v)) continue;
            for (uint32_t mb : {1u, 2u, 4u, 8u}) {
              if (mb * dp > m.global_batch) continue;
              for (Recompute r : {Recompute::none, Recompute::selective, Recompute::full})
                for (Sharding s : {Sharding::none, Sharding::optimizer, Sharding::full}) {
                  const Layout l{tp, pp, dp, ep, 1, v, mb, r, s};
                  const Score sc = evaluate(m, d, l, f);
                  if (sc.fits && sc.step_s < best.score.step_s) best = {l, sc};
                }
            }
          }
        }
      }
  return best;
}

TEST(Planner, SearchFindsWhatABruteForceOverItsModelFinds) {
  for (double memory : {80.0, 16.0, 6.0}) {
    for (bool blocking : {false, true}) {
      Framework f;
      f.blocking_p2p = blocking;
      const auto got = search(small_moe(), sixteen(memory), Space{}, f, {}, 1);
      const Candidate want = brute_force(small_moe(), sixteen(memory), f);
      ASSERT_EQ(got.size(), 1u) << memory << " GiB";
      EXPECT_DOUBLE_EQ(got[0].score.step_s, want.score.step_s)
          << memory << " GiB: search " << describe(got[0].layout) << ", brute force "
          << describe(want.layout);
      EXPECT_TRUE(got[0].score.fits);
    }
  }
}

TEST(Planner, NothingFitsInTooLittleMemory) {
  EXPECT_TRUE(search(small_moe(), sixteen(0.01), Space{}).empty());
}

TEST(Planner, TheRuntimeSpaceKeepsTensorAndContextParallelismAtOne) {
  const auto got = search(small_moe(), sixteen(80), Space::runtime(), {}, {}, 50);
  ASSERT_FALSE(got.empty());
  for (const auto& c : got) {
    EXPECT_EQ(c.layout.tp, 1u);
    EXPECT_EQ(c.layout.cp, 1u);
  }
}

TEST(Planner, ModelFlopsAreSixNPlusAttention) {
  Model m;  // GPT-3 175B
  m.layers = 96;
  m.hidden = 12288;
  m.ffn = 4 * 12288;
  m.heads = m.kv_heads = 96;
  m.vocab = 51200;
  m.seq = 2048;
  m.global_batch = 1;
  const double n = 96.0 * 12 * 12288.0 * 12288 + 12288.0 * 51200;  // matmul parameters, logits included
  EXPECT_NEAR(model_flops_per_token(m), 6 * n + 12.0 * 96 * 12288 * 2048, 1);
}

TEST(Planner, EvaluateRefusesALayoutThatDoesNotCoverTheDevices) {
  Layout l;
  l.tp = 2;
  l.dp = 4;
  EXPECT_THROW(evaluate(small_moe(), sixteen(80), l), Error);
}

std::string refusal(const std::string& yaml) {
  try {
    parse_request(yaml, "req.yaml");
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Code::invalid_argument);
    return e.what();
  }
  return "(accepted)";
}

const char* kModel =
    "model: {layers: 4, hidden: 256, ffn: 1024, heads: 8, vocab: 256, seq: 128, global_batch: 32}\n";

// What the HAL measured replaces the defaults: the model's own rate prices
// compute with no non-GEMM share added, each level's latency is charged to
// the exchanges on that level, and measured bandwidths get no link
// efficiency.
TEST(Planner, MeasuredRatesAndLinksReplaceTheDefaults) {
  const Model m = small_moe();
  Devices d = sixteen(80);
  const Layout l{1, 1, 16, 8};  // ep 8 inside a node, dp 16 over two
  Efficiency eff{};
  eff.expert_width = 0;  // the experts at the GEMM rate, as the dense layers
  const Score base = evaluate(m, d, l, {}, eff);
  const double flops = model_flops_per_token(m) * static_cast<double>(m.global_batch) * m.seq / d.count;
  EXPECT_NEAR(base.compute_s, flops / (d.gemm_tflops * 1e12) * (1 + eff.non_gemm), 1e-12);

  Devices measured = d;
  measured.model_tflops = 100;
  EXPECT_NEAR(evaluate(m, measured, l, {}, eff).compute_s, flops / 100e12, 1e-12);

  // 2 ms more per intra-node exchange: 6 per layer and micro-batch (four of
  // tokens, the counts, the load statistics); both gradient rings (the dense
  // parameters' over 16 ranks, the experts' over the 2 holding the same
  // experts) cross nodes.
  measured = d;
  measured.intra_latency_us = eff.latency_s * 1e6 + 2000;
  const Score slow = evaluate(m, measured, l, {}, eff);
  const double micro = static_cast<double>(m.global_batch) / l.dp / l.micro_batch;
  EXPECT_NEAR(slow.ep_s - base.ep_s, m.layers * micro * 6 * 2e-3, 1e-9);
  measured.inter_latency_us = eff.latency_s * 1e6 + 5000;
  EXPECT_NEAR(evaluate(m, measured, l, {}, eff).dp_s - slow.dp_s, 2 * 5e-3 * 0.5, 1e-9);  // half overlapped

  measured = d;
  measured.links_measured = true;
  EXPECT_LT(evaluate(m, measured, l, {}, eff).dp_s, base.dp_s);
  measured.intra_gbps *= eff.link;
  measured.inter_gbps *= eff.link;
  EXPECT_NEAR(evaluate(m, measured, l, {}, eff).dp_s, base.dp_s, 1e-12);
}

TEST(PlannerRequest, ReadsAWholeRequest) {
  const Request q = parse_request(std::string(kModel) +
                                      "devices: {count: 4, peak_tflops: 1.2, memory_gib: 16}\n"
                                      "framework: {dp_overlap: 0}\n"
                                      "search: {tp: 1, recompute: [none, full], top: 3}\n",
                                  "req.yaml");
  EXPECT_EQ(q.model.layers, 4u);
  EXPECT_EQ(q.model.kv_heads, 8u);
  EXPECT_EQ(q.devices.count, 4u);
  EXPECT_EQ(q.space.tp, std::vector<uint32_t>{1});
  EXPECT_EQ(q.space.recompute.size(), 2u);
  EXPECT_EQ(q.top, 3u);
  EXPECT_FALSE(search(q.model, q.devices, q.space, q.framework, q.efficiency, q.top).empty());
}

TEST(PlannerRequest, ReadsMeasuredLinksAndRates) {
  const Request q = parse_request(std::string(kModel) +
                                      "devices: {count: 4, peak_tflops: 1.2, model_tflops: 0.4,\n"
                                      "          intra_latency_us: 700, inter_latency_us: 2500,\n"
                                      "          links_measured: true}\n",
                                  "req.yaml");
  EXPECT_DOUBLE_EQ(q.devices.model_tflops, 0.4);
  EXPECT_DOUBLE_EQ(q.devices.intra_latency_us, 700);
  EXPECT_DOUBLE_EQ(q.devices.inter_latency_us, 2500);
  EXPECT_TRUE(q.devices.links_measured);
  const std::string over =
      refusal(std::string(kModel) + "devices: {count: 4, peak_tflops: 1,\n  model_tflops: 3}\n");
  EXPECT_NE(over.find("req.yaml:3"), std::string::npos) << over;
  EXPECT_NE(over.find("devices.model_tflops"), std::string::npos) << over;
}

TEST(PlannerRequest, RefusalsNameTheFileLineAndField) {
  const std::string devices = "devices: {count: 4, peak_tflops: 1}\n";
  const std::string unknown = refusal(std::string(kModel) + devices + "search: {tp: 1, zz: 2}\n");
  EXPECT_NE(unknown.find("req.yaml:3"), std::string::npos) << unknown;
  EXPECT_NE(unknown.find("zz"), std::string::npos) << unknown;
  const std::string missing =
      refusal("model: {layers: 4, hidden: 256, ffn: 1024, heads: 8, vocab: 256, seq: 128}\n" + devices);
  EXPECT_NE(missing.find("model.global_batch"), std::string::npos) << missing;
  const std::string heads = refusal(
      "model: {layers: 4, hidden: 250, ffn: 1024, heads: 8, vocab: 256, seq: 128, global_batch: 8}\n" +
      devices);
  EXPECT_NE(heads.find("model.heads"), std::string::npos) << heads;
  const std::string recompute = refusal(std::string(kModel) + devices + "search:\n  recompute: [some]\n");
  EXPECT_NE(recompute.find("req.yaml:4"), std::string::npos) << recompute;
  EXPECT_NE(recompute.find("'some' is not one of none, selective, full"), std::string::npos) << recompute;
  const std::string no_devices = refusal(kModel);
  EXPECT_NE(no_devices.find("devices"), std::string::npos) << no_devices;
  const std::string negative = refusal(std::string(kModel) + "devices: {count: 4, peak_tflops: -1}\n");
  EXPECT_NE(negative.find("devices.peak_tflops"), std::string::npos) << negative;
}

}  // namespace
}  // namespace sigma::planner
