// One policy over one scenario: the discrete-event loop. Events (failures,
// telemetry samples, repairs, step boundaries) come off a queue ordered by
// time and then by insertion; between events the clock advances and every
// accelerator-second is booked once. Decisions are the real Monitor's,
// Scheduler's and restore planner's; this file applies them.
#pragma once

#include <sigma/sim.hpp>

namespace sigma::sim::detail {

// The number of spares `p` keeps on `s`'s cluster (spares.cpp).
uint32_t spares_for(const Scenario& s, const Policy& p);
// The chance, under the failure model, that `spares` run out in some repair
// window of the job (a pause, or under contained recovery a replica that
// waits degraded).
double spare_shortfall_risk(const Scenario& s, const Policy& p, uint32_t spares);

PolicyResult simulate(const Scenario& s, const Policy& p);

}  // namespace sigma::sim::detail
