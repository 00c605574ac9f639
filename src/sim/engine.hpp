// One policy over one scenario: the discrete-event loop. Events (failures,
// telemetry samples, repairs, step boundaries) come off a queue ordered by
// time and then by insertion; between events the clock advances and every
// accelerator-second is booked once. Decisions are the real Monitor's,
// Scheduler's and restore planner's; this file applies them.
#pragma once

#include <sigma/sim.hpp>

#include <vector>

namespace sigma::sim::detail {

// The spares `p` keeps on `s`'s cluster (spares.cpp), and the chance,
// under the failure model, that they run out in some repair window of the
// job (a pause, or under contained recovery a replica that waits degraded).
struct SparePool {
  uint32_t spares = 0;
  double shortfall_risk = 0;
};
SparePool spare_pool(const Scenario& s, const Policy& p);

// The share of the failure model's failures whose scope is `scope`.
double scope_share(const FailureModel& f, Scope scope);

PolicyResult simulate(const Scenario& s, const Policy& p);

// Count, median, 99th percentile and maximum of `v` (report.cpp).
LatencyFigures latency_figures(std::vector<double> v);

}  // namespace sigma::sim::detail
