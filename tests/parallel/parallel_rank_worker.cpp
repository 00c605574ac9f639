// One rank of the parallel tests: "parallel_rank_worker CASE RANK WORLD DIR".
// CASE "groups" (8 ranks, dp 4 ep 2 pp 2) all-reduces the world rank in
// each of its four groups and writes the sums; any other CASE names an MoE
// dispatch case (moe_cases.hpp): the rank routes its tokens, dispatches,
// runs its experts, combines, and writes its output rows, the group's load
// statistics and whether from_experts(to_experts(x)) == x.
#include "autotune_worker.hpp"
#include "moe_cases.hpp"
#include "pipe_model.hpp"
#include "rank_main.hpp"

#include <sigma/parallel.hpp>
#include <sigma/pipeline.hpp>

#include <signal.h>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <random>

using namespace sigma;

namespace {

constexpr auto kTimeout = std::chrono::seconds(60);

void groups_case(uint32_t rank, const std::string& dir, std::shared_ptr<bootstrap::Store> store) {
  const parallel::Layout layout{4, 2, 2};
  parallel::Groups g(hal::Plugin::load("cpu"), std::move(store), "gen0/", 0, rank, layout, kTimeout);
  std::ofstream out(dir + "/groups-" + std::to_string(rank));
  for (auto kind : {parallel::GroupKind::data, parallel::GroupKind::expert, parallel::GroupKind::expert_data,
                    parallel::GroupKind::pipeline}) {
    int64_t v = rank;
    g.comm(kind).run(hal::coll_args(HAL_COLL_ALL_REDUCE, HAL_DTYPE_I64, 1, &v, &v), kTimeout);
    out << parallel::group_kind_name(kind) << " " << g.rank_in(kind) << " " << g.size_of(kind) << " " << v
        << "\n";
  }
  try {  // no interleaving, no wrap groups
    g.comm(parallel::GroupKind::pipeline_wrap);
    out << "pipeline_wrap present\n";
  } catch (const Error& e) {
    out << "no_wrap " << code_name(e.code()) << "\n";
  }
}

void moe_case(const test::Case& c, uint32_t rank, uint32_t world, const std::string& dir,
              std::shared_ptr<bootstrap::Store> store) {
  const test::Inputs in = test::make_inputs(c);
  parallel::Layout layout;
  layout.dp = layout.ep = world;
  parallel::Groups groups(hal::Plugin::load("cpu"), std::move(store), "moe/", 0, rank, layout, kTimeout);
  parallel::DispatchOptions opt;
  opt.num_experts = test::kExperts;
  opt.exchange = c.exchange;
  opt.timeout = kTimeout;
  opt.round_min_bytes = c.rounds ? 0 : UINT64_MAX;  // the tests' rows are tiny
  parallel::Dispatcher d(groups.comm(parallel::GroupKind::expert),
                         groups.rank_in(parallel::GroupKind::expert), world, opt);
  if (!c.placement.empty()) d.set_placement(c.placement);
  const auto ro = parallel::route(in.logits[rank].data(), c.tokens_per_rank[rank], c.router);
  const auto plan = d.plan(ro);
  const auto rows = d.dispatch(plan, in.tokens[rank].data(), test::kHidden, c.dtype);
  const auto y = test::run_experts(rows, plan.expert_offsets, d.local_expert_ids(), c.dtype);
  std::vector<uint8_t> out(c.tokens_per_rank[rank] * test::kHidden * hal::dtype_size(c.dtype));
  d.combine(plan, y.data(), ro.weights.data(), test::kHidden, c.dtype, out.data());
  std::ofstream(dir + "/out-" + std::to_string(rank), std::ios::binary)
      .write(reinterpret_cast<const char*>(out.data()), static_cast<std::streamsize>(out.size()));

  const auto g = d.global_stats(ro.stats);
  std::ofstream stats(dir + "/stats-" + std::to_string(rank));
  stats.precision(17);
  stats << g.num_tokens << " " << g.dropped() << " " << g.aux_loss();
  for (size_t e = 0; e < g.routed.size(); ++e) stats << " " << g.routed[e] << " " << g.kept[e];
  stats << "\n";

  std::vector<uint8_t> sent(plan.sent_rows() * test::kHidden * hal::dtype_size(c.dtype));
  for (size_t i = 0; i < sent.size(); ++i) sent[i] = static_cast<uint8_t>(i * 13 + rank);
  const auto there = d.to_experts(plan, sent.data(), test::kHidden, c.dtype);
  const auto back = d.from_experts(plan, there.data(), test::kHidden, c.dtype);
  stats << (back == sent ? "adjoint ok" : "adjoint broken") << "\n";
  stats << plan.moving_rows << "\n";
}

// "device/OPTIONS/CASE": the MoE case on the sim vendor with OPTIONS
// (opaque=1: device memory the host cannot read), tokens, rows and outputs
// in device buffers through dispatch_on_device / combine_on_device; the
// experts run on the host between them, on rows copied over.
void moe_device_case(const std::string& options, const test::Case& c, uint32_t rank, uint32_t world,
                     const std::string& dir, std::shared_ptr<bootstrap::Store> store) {
  const test::Inputs in = test::make_inputs(c);
  hal::LoadOptions lo;
  lo.options = options;
  const hal::PluginPtr plugin = hal::Plugin::load("sim", lo);
  parallel::Layout layout;
  layout.dp = layout.ep = world;
  parallel::Groups groups(plugin, std::move(store), "moe/", 0, rank, layout, kTimeout);
  parallel::DispatchOptions opt;
  opt.num_experts = test::kExperts;
  opt.timeout = kTimeout;
  opt.round_min_bytes = c.rounds ? 0 : UINT64_MAX;  // the tests' rows are tiny
  parallel::Dispatcher d(groups.comm(parallel::GroupKind::expert),
                         groups.rank_in(parallel::GroupKind::expert), world, opt);
  const auto ro = parallel::route(in.logits[rank].data(), c.tokens_per_rank[rank], c.router);
  const auto plan = d.plan(ro);
  const uint64_t row = test::kHidden * hal::dtype_size(c.dtype);
  const auto device = [&](uint64_t rows) {
    return hal::Buffer(plugin, 0, std::max<uint64_t>(rows * row, 1));
  };
  hal::Buffer tokens = device(c.tokens_per_rank[rank]), rows = device(plan.expert_rows()),
              y_dev = device(plan.expert_rows()), out_dev = device(c.tokens_per_rank[rank]);
  tokens.copy_from_host(in.tokens[rank].data(), c.tokens_per_rank[rank] * row);
  d.dispatch_on_device(plan, tokens.data(), test::kHidden, c.dtype, rows.data());
  std::vector<uint8_t> host_rows(plan.expert_rows() * row);
  rows.copy_to_host(host_rows.data(), host_rows.size());
  const auto y = test::run_experts(host_rows, plan.expert_offsets, d.local_expert_ids(), c.dtype);
  y_dev.copy_from_host(y.data(), y.size());
  d.combine_on_device(plan, y_dev.data(), ro.weights.data(), test::kHidden, c.dtype, out_dev.data());
  std::vector<uint8_t> out(c.tokens_per_rank[rank] * row);
  out_dev.copy_to_host(out.data(), out.size());
  std::ofstream(dir + "/out-" + std::to_string(rank), std::ios::binary)
      .write(reinterpret_cast<const char*>(out.data()), static_cast<std::streamsize>(out.size()));
  // The exchanges' adjoint (to_experts / from_experts) is host memory's
  // only: nothing to check here, and nothing claimed.
  std::ofstream(dir + "/stats-" + std::to_string(rank)) << "device\nno adjoint on device memory\n";
}

// "census_kill" / "census_lost" / "census_hang": 4 ranks dispatch and
// combine tokens step after step, the groups' failure namer on the
// dispatcher. census_kill: rank 2 kills itself (SIGKILL) as step 3 starts.
// census_lost and census_hang (the sim vendor, DIR/scenario.yaml): the
// scenario loses rank 2's device, or hangs it inside a collective its peers
// finish, in its third step (hang: each collective bounded at 5 s, not 20). A rank
// that fails writes the error and the seconds from the failing step's start
// to error-R and exits 1.
void census_case(const std::string& name, uint32_t rank, uint32_t world, const std::string& dir,
                 std::shared_ptr<bootstrap::Store> store) {
  using clock = std::chrono::steady_clock;
  const std::string scenario = dir + "/scenario.yaml";
  const bool sim = std::filesystem::exists(scenario);
  hal::LoadOptions lo;
  if (sim) lo.options = "rank=" + std::to_string(rank) + ";scenario=" + scenario;
  const hal::PluginPtr plugin = hal::Plugin::load(sim ? "sim" : "cpu", lo);
  parallel::Layout layout;
  layout.dp = layout.ep = world;
  parallel::Groups groups(plugin, std::move(store), "census/", 0, rank, layout, kTimeout);
  parallel::DispatchOptions opt;
  opt.num_experts = test::kExperts;
  opt.timeout = std::chrono::seconds(name == "census_hang" ? 5 : 20);
  opt.on_failure = groups.failure_namer(parallel::GroupKind::expert, std::chrono::seconds(2));
  parallel::Dispatcher d(groups.comm(parallel::GroupKind::expert), rank, world, opt);
  const auto ro_opt = test::router(2, 0);
  for (uint32_t step = 0; step < 10; ++step) {
    if (name == "census_kill" && rank == 2 && step == 3) ::raise(SIGKILL);
    const auto t0 = clock::now();
    std::mt19937 rng(step * 7 + rank);
    std::normal_distribution<float> n01(0, 1);
    std::vector<float> logits(16 * test::kExperts), tokens(16 * test::kHidden), out(tokens.size());
    for (auto& x : logits) x = n01(rng);
    for (auto& x : tokens) x = n01(rng);
    try {
      const auto ro = parallel::route(logits.data(), 16, ro_opt);
      const auto plan = d.plan(ro);
      const auto rows = d.dispatch(plan, tokens.data(), test::kHidden, HAL_DTYPE_F32);
      const auto y = test::run_experts(rows, plan.expert_offsets, d.local_expert_ids(), HAL_DTYPE_F32);
      d.combine(plan, y.data(), ro.weights.data(), test::kHidden, HAL_DTYPE_F32, out.data());
    } catch (const Error& e) {
      std::ofstream(dir + "/error-" + std::to_string(rank))
          << e.what() << "\n"
          << std::chrono::duration<double>(clock::now() - t0).count() << "\n";
      throw;
    }
  }
}

// "pipe": every rank a stage of y = tanh(W x) (pipe_model.hpp), 8
// micro-batches in 1F1B; writes its weight gradient and measured bubble.
// "pipe_kill": the same on 3 stages, where stage 1 kills itself (SIGKILL)
// in its forward of micro-batch 3; the others must fail naming it.
// "pipe_interleaved": every rank holds 2 chunks of a model of 2 x world
// parts (chunk c of stage s is part c * world + s), interleaved 1F1B;
// writes each part's gradient as grad-PART.
void pipe_case(const std::string& name, uint32_t rank, uint32_t world, const std::string& dir,
               std::shared_ptr<bootstrap::Store> store) {
  const bool kill = name == "pipe_kill";
  parallel::Layout layout;
  layout.pp = world;
  layout.vpp = name == "pipe_interleaved" ? 2 : 1;
  parallel::Groups g(hal::Plugin::load("cpu"), std::move(store), "pipe/", 0, rank, layout, kTimeout);
  parallel::PipelineOptions opt;
  opt.micro_batches = 8;
  opt.activation_bytes = test::kActivationBytes;
  opt.timeout = std::chrono::seconds(20);
  const uint32_t stage = g.rank_in(parallel::GroupKind::pipeline);
  parallel::Pipeline pipe(g, opt);  // the groups' communicators, chunks from the layout
  std::vector<test::Stage> chunks;
  for (uint32_t c = 0; c < layout.vpp; ++c) chunks.emplace_back(c * world + stage);
  parallel::StageFns fns;
  // A stage's compute stands in as 4 ms forward, 8 ms backward (the model
  // itself takes microseconds): the measured bubble is then the schedule's,
  // not the exchange's.
  fns.forward = [&](uint32_t micro, uint32_t chunk, const void* in, void* out) {
    if (kill && stage == 1 && micro == 3) ::raise(SIGKILL);
    std::this_thread::sleep_for(std::chrono::milliseconds(4));
    const auto x = in ? std::vector<float>(static_cast<const float*>(in),
                                           static_cast<const float*>(in) + test::kRows * test::kWidth)
                      : test::input(micro);
    const auto y = chunks.at(chunk).forward(micro, x.data());
    if (out) std::memcpy(out, y.data(), test::kActivationBytes);
  };
  fns.backward = [&](uint32_t micro, uint32_t chunk, const void* grad_out, void* grad_in) {
    std::this_thread::sleep_for(std::chrono::milliseconds(8));
    const auto gx = chunks.at(chunk).backward(micro, static_cast<const float*>(grad_out));
    if (grad_in) std::memcpy(grad_in, gx.data(), test::kActivationBytes);
  };
  try {
    const auto stats = pipe.run(fns);
    for (uint32_t c = 0; c < layout.vpp; ++c)
      std::ofstream(dir + "/grad-" + std::to_string(c * world + stage), std::ios::binary)
          .write(reinterpret_cast<const char*>(chunks[c].dw.data()),
                 static_cast<std::streamsize>(chunks[c].dw.size() * 4));
    std::ofstream(dir + "/bubble-" + std::to_string(rank)) << stats.bubble() << "\n";
  } catch (const Error& e) {
    std::ofstream(dir + "/error-" + std::to_string(rank)) << code_name(e.code()) << ": " << e.what() << "\n";
    throw;
  }
}

}  // namespace

int main(int argc, char** argv) {
  return sigma::test::rank_main(argc, argv, [](const sigma::test::RankCase& c) {
    const std::string& name = c.name;
    const std::string& dir = c.dir;
    const uint32_t rank = c.rank, world = c.world;
    const auto& store = c.store;
    if (name == "groups") {
      groups_case(rank, dir, store);
    } else if (name == "autotune") {
      test::autotune_case(rank, world, dir, store);
    } else if (name == "pipe" || name == "pipe_kill" || name == "pipe_interleaved") {
      pipe_case(name, rank, world, dir, store);
    } else if (name == "census_kill" || name == "census_lost" || name == "census_hang") {
      census_case(name, rank, world, dir, store);
    } else if (name.rfind("device/", 0) == 0) {
      const size_t cut = name.find('/', 7);
      const auto it = test::cases().find(name.substr(cut + 1));
      if (cut == std::string::npos || it == test::cases().end())
        throw Error(Code::invalid_argument, "no case " + name);
      moe_device_case(name.substr(7, cut - 7), it->second, rank, world, dir, store);
    } else {
      const auto it = test::cases().find(name);
      if (it == test::cases().end()) throw Error(Code::invalid_argument, "no case " + name);
      moe_case(it->second, rank, world, dir, store);
    }
  });
}
