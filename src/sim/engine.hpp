// One policy over one scenario: the discrete-event loop. Events (failures,
// telemetry samples, repairs, step boundaries) come off a queue ordered by
// time and then by insertion; between events the clock advances and every
// accelerator-second is booked once. Decisions are the real Monitor's,
// Scheduler's and restore planner's; this file applies them.
#pragma once

#include <sigma/sim.hpp>

namespace sigma::sim::detail {

// The number of spares `p` keeps on `s`'s cluster.
uint32_t spares_for(const Scenario& s, const Policy& p);

PolicyResult simulate(const Scenario& s, const Policy& p);

}  // namespace sigma::sim::detail
