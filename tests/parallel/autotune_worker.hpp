// One rank of the autotuner test (parallel_rank_worker CASE "autotune"): a
// 4-rank MoE layer whose experts carry state that changes every step, run
// for a fixed number of paced steps. Each step the rank measures its
// exchange and its link's retry rate, the group gathers them, every rank's
// ExpertBalancer decides the same, and move_experts carries experts' state
// to their new rank. With DIR/scenario.yaml the ranks run on the sim vendor
// (which can slow a link); without, on the cpu vendor. Writes per step a
// checksum of its output (out-R.txt), and on rank 0 the per-step samples
// (samples.jsonl) and each rebalance (rebalances.jsonl). With
// DIR/no-autotune the balancer is not asked (the baseline). With
// DIR/token-share holding S, a slow rank also takes S of an even share of
// the step's 48 x world tokens (BalancerOptions::slow_token_share).
#pragma once

#include "moe_cases.hpp"

#include <sigma/autotune.hpp>
#include <sigma/kernels.hpp>

#include <filesystem>
#include <fstream>
#include <map>
#include <thread>

namespace sigma::test {

constexpr uint32_t kTuneSteps = 200;
constexpr auto kTunePace = std::chrono::milliseconds(40);

inline void autotune_case(uint32_t rank, uint32_t world, const std::string& dir,
                          std::shared_ptr<bootstrap::Store> store) {
  using clock = std::chrono::steady_clock;
  const std::string scenario = dir + "/scenario.yaml";
  hal::LoadOptions lo;
  const bool sim = std::filesystem::exists(scenario);
  if (sim) lo.options = "rank=" + std::to_string(rank) + ";scenario=" + scenario;
  auto plugin = hal::Plugin::load(sim ? "sim" : "cpu", lo);
  parallel::Layout layout;
  layout.dp = layout.ep = world;
  parallel::Groups groups(plugin, store, "tune/", 0, rank, layout, std::chrono::seconds(60));
  auto& ep = groups.comm(parallel::GroupKind::expert);
  parallel::DispatchOptions opt;
  opt.num_experts = kExperts;
  parallel::Dispatcher d(ep, rank, world, opt);
  parallel::BalancerOptions bo;
  bo.trigger_steps = 3;
  bo.recover_steps = 20;
  std::ifstream(dir + "/token-share") >> bo.slow_token_share;
  parallel::ExpertBalancer balancer(kExperts, world, bo);

  // Each expert's state (a bias), held by its rank, changed every step.
  std::map<uint32_t, std::vector<float>> state;
  for (uint32_t e : d.local_expert_ids()) {
    std::vector<float> b(kHidden);
    for (uint64_t i = 0; i < kHidden; ++i) b[i] = 0.01f * static_cast<float>((e + 1) * i);
    state[e] = b;
  }
  std::ofstream out(dir + "/out-" + std::to_string(rank) + ".txt");
  std::ofstream samples_log, rebalances;
  if (rank == 0) {
    samples_log.open(dir + "/samples.jsonl");
    rebalances.open(dir + "/rebalances.jsonl");
  }
  double last_retries = -1;
  auto last_t = clock::now();
  Case c{{48, 48, 48, 48}, router(2, 0)};
  for (uint32_t step = 0; step < kTuneSteps; ++step) {
    const auto paced = clock::now();
    // Ranks start their steps together, so a step's exchange time is the
    // exchange, not one rank waiting for another's pacing.
    ep.run(hal::coll_args(HAL_COLL_BARRIER, HAL_DTYPE_U8, 0, nullptr, nullptr), std::chrono::seconds(60));
    const auto t0 = clock::now();
    std::mt19937 rng(step * 131 + rank);
    std::normal_distribution<float> n01(0, 1);
    const uint64_t T = parallel::split_tokens(48 * world, balancer.token_share())[rank];
    std::vector<float> logits(T * kExperts), tokens(T * kHidden);
    for (auto& x : logits) x = n01(rng);
    for (auto& x : tokens) x = n01(rng);
    const auto ro = parallel::route(logits.data(), T, c.router);
    const auto plan = d.plan(ro);
    const auto rows = d.dispatch(plan, tokens.data(), kHidden, HAL_DTYPE_F32);
    auto y = run_experts(rows, plan.expert_offsets, d.local_expert_ids(), HAL_DTYPE_F32);
    auto* yf = reinterpret_cast<float*>(y.data());
    for (size_t l = 0; l < d.local_experts(); ++l) {
      auto& bias = state.at(d.local_expert_ids()[l]);  // the state must be here
      for (uint64_t r = plan.expert_offsets[l]; r < plan.expert_offsets[l + 1]; ++r)
        for (uint64_t i = 0; i < kHidden; ++i) {
          yf[r * kHidden + i] += bias[i];
          bias[i] += 1e-4f * yf[r * kHidden + i];
        }
    }
    std::vector<float> combined(T * kHidden);
    d.combine(plan, y.data(), ro.weights.data(), kHidden, HAL_DTYPE_F32, combined.data());
    const double exchange_s = std::chrono::duration<double>(clock::now() - t0).count();
    out << step << " " << kernels::checksum(combined.data(), combined.size() * sizeof(float)) << "\n";

    double retries = 0, rate = 0;
    for (const auto& s : plugin->read_telemetry(0, {HAL_FIELD_LINK_RETRIES}))
      if (s.status == HAL_OK) retries = static_cast<double>(s.value.u64);
    const auto now = clock::now();
    if (last_retries >= 0)
      rate = (retries - last_retries) / std::chrono::duration<double>(now - last_t).count();
    last_retries = retries;
    last_t = now;
    double mine[2] = {exchange_s, rate};
    std::vector<double> all(2 * world);
    ep.run(hal::coll_args(HAL_COLL_ALL_GATHER, HAL_DTYPE_F64, 2, mine, all.data()), std::chrono::seconds(60));
    std::vector<parallel::RankSample> samples(world);
    for (uint32_t r = 0; r < world; ++r) samples[r] = {all[2 * r], all[2 * r + 1]};
    if (rank == 0) {
      samples_log << "{\"step\":" << step << ",\"retries_per_s\":[";
      for (uint32_t r = 0; r < world; ++r) samples_log << (r ? "," : "") << samples[r].link_retry_rate;
      samples_log << "],\"exchange_s\":[";
      for (uint32_t r = 0; r < world; ++r) samples_log << (r ? "," : "") << samples[r].exchange_s;
      samples_log << "]}\n";
    }
    std::optional<parallel::Rebalance> rb;
    if (!std::filesystem::exists(dir + "/no-autotune")) rb = balancer.observe(step, samples);
    if (rb) {
      if (rank == 0) rebalances << parallel::rebalance_json(*rb) << "\n" << std::flush;
      parallel::move_experts(
          d, ep, rank, *rb,
          [&](uint32_t e) {
            std::vector<float> b = state.at(e);
            state.erase(e);
            std::vector<uint8_t> bytes(b.size() * sizeof(float));
            std::memcpy(bytes.data(), b.data(), bytes.size());
            return bytes;
          },
          [&](uint32_t e, std::vector<uint8_t> bytes) {
            std::vector<float> b(bytes.size() / sizeof(float));
            std::memcpy(b.data(), bytes.data(), bytes.size());
            state[e] = b;
          },
          std::chrono::seconds(60));
    }
    std::this_thread::sleep_until(paced + kTunePace);
  }
}

}  // namespace sigma::test
