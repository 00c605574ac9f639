#include "plan.hpp"

#include "adamw.hpp"

#include <sigma/bootstrap.hpp>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <unistd.h>

namespace moe {

namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// A sum of `count` floats over `comm`, in a HAL buffer; its seconds.
double timed_all_reduce(sigma::hal::Communicator& comm, const sigma::hal::PluginPtr& plugin, uint64_t count) {
  sigma::hal::Buffer b(plugin, 0, count * sizeof(float));
  const double t0 = now_s();
  comm.run(sigma::hal::coll_args(HAL_COLL_ALL_REDUCE, HAL_DTYPE_F32, count, b.data(), b.data()),
           std::chrono::seconds(60));
  return now_s() - t0;
}

sigma::planner::Model planner_model(const ModelConfig& config, int64_t batch, uint32_t world) {
  sigma::planner::Model m;
  m.name = "moe_trainer";
  m.layers = static_cast<uint32_t>(config.layers);
  m.hidden = static_cast<uint32_t>(config.d_model);
  m.ffn = static_cast<uint32_t>(config.ffn);
  m.heads = m.kv_heads = static_cast<uint32_t>(config.heads);
  m.vocab = static_cast<uint32_t>(config.vocab);
  m.experts = static_cast<uint32_t>(config.experts);
  m.top_k = static_cast<uint32_t>(config.top_k);
  m.seq = static_cast<uint32_t>(config.seq);
  m.global_batch = static_cast<uint64_t>(batch) * world;
  m.bytes_per_param = 4;
  return m;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

double measure_gemm_gflops() {
  const torch::Tensor a = torch::randn({512, 512}), b = torch::randn({512, 512});
  torch::matmul(a, b);
  const double t0 = now_s();
  int n = 0;
  while (now_s() - t0 < 0.3 || n < 3) {
    torch::matmul(a, b);
    ++n;
  }
  return 2.0 * 512 * 512 * 512 * n / (now_s() - t0) * 1e-9;
}

double measure_model_gflops(const ModelConfig& config, int64_t batch, uint64_t seed) {
  // A world of one: the dispatcher's exchanges are local copies.
  const std::string dir =
      std::filesystem::temp_directory_path() / ("moe-measure-" + std::to_string(::getpid()));
  auto plugin = sigma::hal::Plugin::load("cpu");
  double gflops = 0;
  {
    sigma::bootstrap::HalBootstrap boot(std::make_shared<sigma::bootstrap::FileStore>(dir), "measure/");
    hal_comm_create_args_t ca{};
    ca.struct_size = sizeof(ca);
    ca.world_size = 1;
    ca.bootstrap = boot.table();
    ca.timeout_ns = 10'000'000'000ull;
    sigma::hal::Communicator comm(plugin, ca);
    sigma::parallel::Dispatcher d(comm, 0, 1,
                                  {static_cast<uint32_t>(config.experts),
                                   sigma::parallel::Exchange::all_to_all, std::chrono::seconds(10)});
    Model model(config, 0, 1, config.experts, seed);
    AdamW dense(model.dense), expert(model.expert);
    const torch::Tensor tokens = torch::randint(0, config.vocab, {batch, config.seq + 1}, torch::kInt64);
    double t0 = 0;
    const int warm = 2, timed = 5;
    for (int i = 0; i < warm + timed; ++i) {
      if (i == warm) t0 = now_s();
      model.dense_grad.zero_();
      model.expert_grad.zero_();
      MoeStats stats;
      torch::Tensor ce;
      model.loss(tokens, d, &stats, &ce).backward();
      dense.update(model.dense, model.dense_grad, 1e-4, 0.1, static_cast<uint64_t>(i + 1));
      expert.update(model.expert, model.expert_grad, 1e-4, 0.1, static_cast<uint64_t>(i + 1));
    }
    const double per_step = (now_s() - t0) / timed;
    const double flops = sigma::planner::model_flops_per_token(planner_model(config, batch, 1));
    gflops = flops * static_cast<double>(batch * config.seq) / per_step * 1e-9;
  }
  std::filesystem::remove_all(dir);
  return gflops;
}

Links probe_links(sigma::hal::Communicator& comm, const sigma::hal::PluginPtr& plugin, uint32_t world) {
  // Small sums, each after a millisecond of compute as a step issues them
  // (not back to back, which keeps every thread hot). Their cost here is
  // bimodal (~0.1 ms, or ~2 ms when a peer's wake-up is late); a step pays
  // the mean of many, so the mean is the latency.
  std::vector<double> small;
  const torch::Tensor a = torch::randn({128, 128});
  for (int i = 0; i < 30; ++i) {
    const double until = now_s() + 0.001;
    while (now_s() < until) torch::matmul(a, a);
    small.push_back(timed_all_reduce(comm, plugin, 1));
  }
  const uint64_t floats = 1u << 20;  // 4 MiB
  std::vector<double> large;
  for (int i = 0; i < 3; ++i) large.push_back(timed_all_reduce(comm, plugin, floats));
  Links l;
  double sum = 0;
  for (double x : small) sum += x;
  l.latency_us = sum / static_cast<double>(small.size()) * 1e6;
  // A ring all-reduce moves 2 (n - 1) / n of the buffer over each device's link.
  const double moved = 2.0 * (world - 1) / world * floats * sizeof(float);
  l.gbps = moved / std::max(1e-9, median(large) - median(small)) * 1e-9;
  return l;
}

Chosen plan_layout(const ModelConfig& config, int64_t batch, uint32_t world, const Rates& rates,
                   uint32_t ep) {
  namespace pl = sigma::planner;
  Chosen c;
  pl::Model& m = c.model = planner_model(config, batch, world);
  pl::Devices& d = c.devices;
  d.count = d.per_node = world;
  d.memory_gib = 4;
  // The workers share the machine's cores: a device gets its share of them.
  const double share = std::min<double>(world, std::thread::hardware_concurrency()) / world;
  d.gemm_tflops = d.peak_tflops = rates.gemm_gflops * 1e-3 * share;
  d.model_tflops = std::min(d.peak_tflops, rates.model_gflops * 1e-3 * share);
  d.intra_gbps = d.inter_gbps = 1;  // TCP over loopback, until measured
  pl::Space s = pl::Space::runtime();
  s.pp = s.vpp = {1};
  s.micro_batch = {static_cast<uint32_t>(batch)};
  s.recompute = {pl::Recompute::none};
  s.sharding = {pl::Sharding::none};
  if (ep > 0) {
    if (world % ep != 0 || m.experts % ep != 0)
      throw std::runtime_error("moe_trainer: expert groups of " + std::to_string(ep) +
                               " ranks must divide the " + std::to_string(world) + " ranks and the " +
                               std::to_string(m.experts) + " experts");
    s.ep = {ep};
  }
  for (uint32_t e = 2; ep == 0 && e <= world; ++e)
    if (world % e == 0 && m.experts % e == 0) s.ep.push_back(e);
  if (s.ep.empty()) s.ep = {1};
  c.framework.dp_overlap = 0;  // this trainer all-reduces after backward
  const auto best = pl::search(m, d, s, c.framework, {}, 1);
  if (best.empty()) throw std::runtime_error("moe_trainer: the planner found no layout that fits");
  c.planned = best.front().layout;
  c.layout = {c.planned.dp, c.planned.ep, 1};
  c.predicted_step_s = best.front().score.step_s;
  c.flops_per_token = pl::model_flops_per_token(m);
  c.describe = pl::describe(c.planned);
  return c;
}

double predict_with_links(const Chosen& chosen, const Links& links) {
  sigma::planner::Devices d = chosen.devices;
  d.intra_latency_us = d.inter_latency_us = links.latency_us;
  d.intra_gbps = d.inter_gbps = links.gbps;
  d.links_measured = true;
  return sigma::planner::evaluate(chosen.model, d, chosen.planned, chosen.framework).step_s;
}

}  // namespace moe
