// run() and sweep(): every policy of a scenario, every point of a sweep.
#include "engine.hpp"

#include <sigma/error.hpp>
#include <sigma/sim.hpp>

#include <tbb/parallel_for.h>

#include <cmath>
#include <mutex>

namespace sigma::sim {
namespace {

void check(const Scenario& s) {
  auto bad = [](const std::string& why) { throw Error(Code::invalid_argument, "sim: " + why); };
  if (s.accelerators < 2) bad("a cluster needs at least 2 accelerators");
  if (s.per_node == 0) bad("per_node must be at least 1");
  if (!(s.days > 0) || !std::isfinite(s.days)) bad("days must be a positive number");
  if (!(s.step_s > 0) || !std::isfinite(s.step_s)) bad("step_s must be a positive number");
  if (!(s.telemetry_period_s > 0)) bad("telemetry_period_s must be positive");
  if (s.failures.categories.empty()) bad("the failure model has no categories");
  if (!(s.failures.weibull_shape > 0)) bad("the Weibull shape must be positive");
  if (!(s.failures.repair_hours > 0)) bad("repair_hours must be positive");
  const FailureModel& f = s.failures;
  if (!(f.straggler_per_accelerator_day >= 0) || !(f.slow_link_per_accelerator_day >= 0) ||
      !(f.straggler_slowdown >= 1) || !(f.slow_link_slowdown >= 1) || !(f.straggler_hours > 0) ||
      !(f.slow_link_hours > 0))
    bad("degradation rates must be >= 0, slowdowns >= 1 and durations positive");
  if (s.policies.empty()) bad("no policy to run");
  if (s.groups.size() > s.accelerators) bad("more scheduler groups than accelerators");
  for (const ScriptedFailure& f : s.script) {
    if (f.device >= s.accelerators)
      bad("scripted failure on device " + std::to_string(f.device) + " of " + std::to_string(s.accelerators));
    if (!(f.at_s >= 0) || !std::isfinite(f.at_s)) bad("scripted failure at a negative or infinite time");
    if (!f.health.empty()) {
      if (f.health != "warning" && f.health != "calm" && f.health != "straggler" && f.health != "slow_link")
        bad("scripted health '" + f.health + "' is not warning, calm, straggler or slow_link");
      continue;
    }
    bool known = false;
    for (const Category& c : s.failures.categories) known = known || c.name == f.category;
    if (!known) bad("scripted failure of unknown category '" + f.category + "'");
  }
  for (const Policy& p : s.policies) {
    if (p.memory_tier && !(p.snapshot_every_s > 0))
      bad("policy '" + p.name + "': a memory tier needs snapshot_every_s");
    if (p.straggler_min_steps < 2 || p.straggler_min_steps > 50)
      bad("policy '" + p.name + "': straggler_min_steps must be 2 to 50");
    if (p.replica_size > 0 && (p.full_restart || p.allow_shrink))
      bad("policy '" + p.name +
          "': contained recovery (replica_size) replaces ranks and keeps the world's size: " +
          "it needs full_restart and allow_shrink off");
  }
}

}  // namespace

double Ledger::total() const noexcept {
  return productive + lost_work + detection + restart + restore + checkpoint + migration + paused + degraded +
         slow + spare + repair;
}

Result run(const Scenario& scenario) {
  check(scenario);
  Result r;
  r.scenario = scenario;
  for (const Policy& p : scenario.policies) r.policies.push_back(detail::simulate(scenario, p));
  return r;
}

std::vector<Result> sweep(const Scenario& base, const SweepAxes& axes) {
  check(base);
  std::vector<Scenario> points;
  for (double m : axes.rate_multiplier)
    for (double f : axes.precursor_fraction)
      for (double lead : axes.precursor_lead_min)
        for (double repair : axes.repair_hours)
          for (const auto& deg : axes.degradation) {
            Scenario s = base;
            s.failures.straggler_per_accelerator_day = deg.per_accelerator_day;
            s.failures.slow_link_per_accelerator_day = deg.per_accelerator_day;
            s.failures.straggler_slowdown = deg.straggler_slowdown;
            s.failures.rate_multiplier = m;
            s.failures.precursor_fraction = f;
            s.failures.precursor_lead_min = lead;
            s.failures.repair_hours = repair;
            points.push_back(std::move(s));
          }
  std::vector<Result> out(points.size());
  // oneTBB's own ordering is invisible to ThreadSanitizer: each point ends
  // by passing this mutex, taken here before the points are freed.
  std::mutex done;
  tbb::parallel_for(size_t{0}, points.size(), [&](size_t i) {
    out[i] = run(points[i]);
    std::lock_guard<std::mutex> lk(done);
  });
  std::lock_guard<std::mutex> lk(done);
  return out;
}

Policy scale_costs(Policy p, double factor) {
  for (double* c :
       {&p.disk_stall_s, &p.disk_restore_s, &p.snapshot_stall_s, &p.memory_restore_s, &p.crash_detect_s,
        &p.hang_detect_s, &p.step_timeout_s, &p.sdc_detect_s, &p.restart_s, &p.replace_s, &p.migrate_s,
        &p.comm_fixed_s, &p.comm_per_member_s, &p.handoff_s, &p.spare_ready_s})
    *c *= factor;
  return p;
}

std::vector<CostVariant> sensitivity(const Scenario& scenario) {
  check(scenario);
  std::vector<CostVariant> out{{"costs x0.5", {}}, {"costs x1", {}}, {"costs x4", {}}, {"world re-form", {}}};
  std::vector<Scenario> points(out.size(), scenario);
  const double factors[] = {0.5, 1, 4};
  for (size_t i = 0; i < 3; ++i)
    for (Policy& p : points[i].policies) p = scale_costs(p, factors[i]);
  for (Policy& p : points[3].policies) {
    p.comm_fixed_s = std::max(p.comm_fixed_s, 60.0);  // as long as the world's communicator takes
    p.comm_per_member_s = 0;
  }
  std::mutex done;  // as in sweep()
  tbb::parallel_for(size_t{0}, points.size(), [&](size_t i) {
    out[i].result = run(points[i]);
    std::lock_guard<std::mutex> lk(done);
  });
  std::lock_guard<std::mutex> lk(done);
  return out;
}

}  // namespace sigma::sim
