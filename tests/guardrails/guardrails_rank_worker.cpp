// One rank of a tiny, deterministic data-parallel job under the guardrails:
// local gradients from (batch, rank), a real all-reduce through the HAL,
// the guardrails' step on the replicated result, an SGD update, in-memory
// snapshots every 5 steps, fingerprints every `interval` steps. A scenario
// injects one fault:
//   clean     nothing
//   nan       rank 1 finds a NaN in its reduced gradient at step 5
//   spike     the batch of step 23 gives a loss 10x too high
//   bitflip   the last rank's parameters get one flipped bit after step 7
//   sim_sdc   (plugin sim) rank 1's device corrupts the all-reduce of step 5
//   skip:B,.. no fault, and batches B,.. are never trained on: the
//             independent clean run a faulty run is compared with when a
//             guardrail skipped or rolled back data
// Each rank journals every decision (DIR/journal.jsonl.rankR) and writes
// DIR/result-R ("key=value" lines): the final parameter fingerprint and the
// steps at which it detected and attributed faults.
//   guardrails_rank_worker RANK WORLD DIR SCENARIO STEPS PLUGIN [OPTIONS]
#include <sigma/bootstrap.hpp>
#include <sigma/guardrails.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <iostream>
#include <map>
#include <set>

using namespace sigma;
using namespace std::chrono_literals;

namespace {

constexpr uint64_t kN1 = 4096, kN2 = 1024, kN = kN1 + kN2;
constexpr float kLr = 0.5f;

struct State {
  std::vector<float> params;
  uint64_t next_batch = 1;
};

std::vector<guardrails::BufferView> views(const std::vector<float>& p) {
  return {{p.data(), kN, HAL_DTYPE_F32}};
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 7) {
    std::cerr << "usage: guardrails_rank_worker RANK WORLD DIR SCENARIO STEPS PLUGIN [OPTIONS]\n";
    return 2;
  }
  const int rank = std::atoi(argv[1]), world = std::atoi(argv[2]);
  const std::string dir = argv[3], scenario = argv[4];
  const uint64_t steps = std::strtoull(argv[5], nullptr, 10);
  const std::string plugin_name = argv[6], options = argc > 7 ? argv[7] : "";
  std::ofstream out(dir + "/result-" + std::to_string(rank) + ".tmp");
  try {
    hal::LoadOptions lo;
    lo.options = options;
    auto plugin = hal::Plugin::load(plugin_name, lo);
    auto store = std::make_shared<bootstrap::FileStore>(dir + "/store");
    bootstrap::HalBootstrap bs(store, "job/");
    hal_comm_create_args_t ca{};
    ca.struct_size = sizeof(ca);
    ca.rank = static_cast<uint32_t>(rank);
    ca.world_size = static_cast<uint32_t>(world);
    ca.bootstrap = bs.table();
    ca.timeout_ns = 60'000'000'000ull;
    hal::Communicator comm(plugin, ca);

    guardrails::Config cfg;
    cfg.loss_scaling.initial_scale = 1024;
    cfg.clipping.max_norm = 0;  // keep the arithmetic plain
    cfg.spike.window = 20;
    cfg.spike.min_history = 10;
    cfg.spike.skip_after = 2;
    cfg.sdc.interval = 5;
    cfg.journal.path = dir + "/journal.jsonl";
    cfg.journal.all_ranks = true;
    guardrails::Group group{&comm, 0, rank, world, guardrails::GradLayout::replicated};
    guardrails::Guardrails guard(cfg, {{"w", HAL_DTYPE_BF16}}, group);
    std::vector<guardrails::FaultReport> faults;
    guard.on_fault([&](const guardrails::FaultReport& f) { faults.push_back(f); });

    State st;
    st.params.resize(kN);
    for (uint64_t i = 0; i < kN; ++i) st.params[i] = 0.1f * std::sin(static_cast<float>(i));
    // What a healthy device computes: the same updates, never corrupted. It
    // stands in for the re-run of a suspect step on a spare.
    std::vector<float> clean = st.params;
    std::map<uint64_t, State> snapshots;
    std::set<uint64_t> skipped_batches;
    if (scenario.rfind("skip:", 0) == 0) {
      for (size_t at = 5; at < scenario.size();) {
        const size_t comma = std::min(scenario.find(',', at), scenario.size());
        skipped_batches.insert(std::stoull(scenario.substr(at, comma - at)));
        at = comma + 1;
      }
    }
    hal::Buffer grad(plugin, 0, kN * 4);
    std::vector<float> g(kN);
    std::map<std::string, std::string> result;

    for (uint64_t step = 1; step <= steps; ++step) {
      while (skipped_batches.count(st.next_batch)) ++st.next_batch;
      const uint64_t batch = st.next_batch++;
      const double scale = guard.loss_scale();
      for (uint64_t i = 0; i < kN; ++i)
        g[i] = static_cast<float>(scale * 0.01 * std::sin(0.37 * i + 1.3 * batch + 0.5 * rank));
      grad.copy_from_host(g.data(), kN * 4);
      if (scenario == "sim_sdc" && rank == 1 && step == 5) {
        hal_fault_spec_t spec{};
        spec.struct_size = sizeof(spec);
        spec.kind = HAL_FAULT_CORRUPT_RESULT;
        plugin->check(plugin->fault_injection()->inject(&spec), "inject");
      }
      comm.run(hal::coll_args(HAL_COLL_ALL_REDUCE, HAL_DTYPE_F32, kN, grad.data(), grad.data()), 60s);
      grad.copy_to_host(g.data(), kN * 4);
      for (float& x : g) x /= static_cast<float>(world);
      if (scenario == "nan" && rank == 1 && step == 5) g[100] = std::nanf("");
      double loss = 1.0 + 0.001 * std::cos(static_cast<double>(batch));
      if (scenario == "spike" && batch == 23) loss *= 10;

      // Two riders per rank travel in the step's exchange; every rank must
      // get every rank's, in rank order.
      const std::vector<double> riders{10.0 * rank + static_cast<double>(step), -static_cast<double>(rank)};
      const auto d = guard.step(step, loss, {{{g.data(), kN, HAL_DTYPE_F32}}}, riders);
      result["action_" + std::to_string(step)] = guardrails::action_name(d.action);
      for (int r = 0; r < world; ++r) {
        const std::vector<double> expect{10.0 * r + static_cast<double>(step), -static_cast<double>(r)};
        if (d.riders.size() != 2 * static_cast<size_t>(world) ||
            !std::equal(expect.begin(), expect.end(), d.riders.begin() + 2 * r))
          result["riders_wrong_at"] = std::to_string(step);
      }
      if (d.action == guardrails::Action::apply) {
        for (uint64_t i = 0; i < kN; ++i) {
          const float u = kLr * g[i] * static_cast<float>(d.grad_multiplier);
          st.params[i] -= u;
          clean[i] -= u;
        }
      } else if (d.action == guardrails::Action::rollback) {
        result["rollback_at"] = std::to_string(step);
        result["rollback_to"] = std::to_string(d.rollback_to_step);
        for (uint64_t b = d.skip_data_begin; b < d.skip_data_end; ++b) skipped_batches.insert(b);
        st = snapshots.at(d.rollback_to_step);
        clean = st.params;
        snapshots.erase(snapshots.upper_bound(d.rollback_to_step), snapshots.end());
        step = d.rollback_to_step;  // the loop's ++ resumes right after it
        continue;
      }
      if (!d.mismatch_ranks.empty() && !result.count("mismatch_at")) {
        result["mismatch_at"] = std::to_string(step);
        std::string ranks;
        for (int r : d.mismatch_ranks) ranks += (ranks.empty() ? "" : ",") + std::to_string(r);
        result["mismatch_ranks"] = ranks;
      }
      if (d.non_finite > 0) {
        result["nonfinite_at"] = std::to_string(step);
        result["scale_after"] = std::to_string(d.next_loss_scale);
      }
      if (scenario == "bitflip" && rank == world - 1 && step == 7) {
        uint32_t bits;
        std::memcpy(&bits, &st.params[321], 4);
        bits ^= 1u << 12;
        std::memcpy(&st.params[321], &bits, 4);
      }
      if (step % 5 == 0) {
        snapshots[step] = st;
        guard.note_snapshot(step);
      }
      if (d.check_fingerprint) {
        const auto fp = guard.check_fingerprint(step, views(st.params));
        if (!fp.match && !result.count("detected_at")) {
          result["detected_at"] = std::to_string(step);
          std::string odd;
          for (int r : fp.odd_ranks) odd += (odd.empty() ? "" : ",") + std::to_string(r);
          result["odd_ranks"] = odd;
        }
        if (fp.rerun_needed) {
          const auto faulty = guard.attribute_rerun(step, guardrails::fingerprint(views(clean)), "spare-0");
          std::string f;
          for (int r : faulty) f += (f.empty() ? "" : ",") + std::to_string(r);
          result["faulty_ranks"] = f;
          // Repair: the first healthy replica's parameters go to everyone.
          int healthy = 0;
          while (std::count(faulty.begin(), faulty.end(), healthy)) ++healthy;
          hal::Buffer p(plugin, 0, kN * 4);
          p.copy_from_host(st.params.data(), kN * 4);
          hal_coll_args_t bc{};
          bc.struct_size = sizeof(bc);
          bc.op = HAL_COLL_BROADCAST;
          bc.dtype = HAL_DTYPE_F32;
          bc.root = static_cast<uint32_t>(healthy);
          bc.count = kN;
          bc.sendbuf = bc.recvbuf = p.data();
          comm.run(bc, 60s);
          p.copy_to_host(st.params.data(), kN * 4);
        }
      }
    }
    char fp[32];
    std::snprintf(fp, sizeof fp, "%016llx",
                  static_cast<unsigned long long>(guardrails::fingerprint(views(st.params))));
    result["final_fingerprint"] = fp;
    result["final_scale"] = std::to_string(guard.loss_scale());
    result["fault_reports"] = std::to_string(faults.size());
    for (const auto& [k, v] : result) out << k << "=" << v << "\n";
    out << "status=ok\n";
  } catch (const std::exception& e) {
    out << "status=error\nerror=" << e.what() << "\n";
    out.close();
    std::rename((dir + "/result-" + std::to_string(rank) + ".tmp").c_str(),
                (dir + "/result-" + std::to_string(rank)).c_str());
    return 1;
  }
  out.close();
  std::rename((dir + "/result-" + std::to_string(rank) + ".tmp").c_str(),
              (dir + "/result-" + std::to_string(rank)).c_str());
  return 0;
}
