// The cluster simulator against its speed goals, in one run: 2,048
// accelerators for 75 days (goal: 10 s) and 131,072 for 30 days (goal:
// 120 s), each with the four standard policies over the same failure
// draws, single-threaded. "pct_of_goal" is the measured time as a
// percentage of the goal (below 100 meets it); "failures" counts failures
// drawn, the work that grows with the cluster; "events" the discrete events
// every policy processed (contained recovery's calls into the runtime's
// machine among them). Also the 243-point sweep of the failure model's
// assumed values at 2,048 x 75 days on oneTBB's pool.
//
//   bench_cluster_sim [--benchmark_repetitions=N]
#include <sigma/sim.hpp>

#include <benchmark/benchmark.h>

#include <chrono>

namespace {

sigma::sim::Scenario scenario(uint32_t accelerators, double days) {
  sigma::sim::Scenario s;
  s.failures = sigma::sim::load_failure_model(std::string(SIGMA_SOURCE_DIR) + "/data/failure-model.json");
  s.accelerators = accelerators;
  s.days = days;
  s.policies = sigma::sim::standard_policies();
  return s;
}

void BM_Simulate(benchmark::State& state) {
  const auto accelerators = static_cast<uint32_t>(state.range(0));
  const auto days = static_cast<double>(state.range(1));
  const double goal_s = static_cast<double>(state.range(2));
  const auto s = scenario(accelerators, days);
  uint64_t failures = 0, events = 0;
  double seconds = 0;
  for (auto _ : state) {
    const auto t0 = std::chrono::steady_clock::now();
    const auto r = sigma::sim::run(s);
    seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    failures = r.policies.back().failures;
    events = 0;
    for (const auto& p : r.policies) events += p.events;
    benchmark::DoNotOptimize(r);
  }
  state.counters["goal_s"] = goal_s;
  state.counters["pct_of_goal"] = 100.0 * seconds / static_cast<double>(state.iterations()) / goal_s;
  state.counters["failures"] = static_cast<double>(failures);
  state.counters["events"] = static_cast<double>(events);
}

void BM_Sweep2048(benchmark::State& state) {
  const auto s = scenario(2048, 75);
  size_t points = 0;
  for (auto _ : state) points = sigma::sim::sweep(s, {}).size();
  state.counters["points"] = static_cast<double>(points);
}

}  // namespace

BENCHMARK(BM_Simulate)
    ->Args({2048, 75, 10})
    ->Args({131072, 30, 120})
    ->UseRealTime()
    ->Unit(benchmark::kSecond)
    ->Iterations(1);
BENCHMARK(BM_Sweep2048)->UseRealTime()->Unit(benchmark::kSecond)->Iterations(1);
BENCHMARK_MAIN();
