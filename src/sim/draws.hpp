// The simulator's random draws: one stream per (seed, device, incarnation),
// so every policy sees the same failures of the same device installation
// whatever it did before, and the numbers do not depend on the standard
// library's distributions (inverse transforms of a SplitMix64 stream).
#pragma once

#include <sigma/sim.hpp>

#include <cstdint>
#include <optional>
#include <vector>

namespace sigma::sim::detail {

class Stream {
 public:
  Stream(uint64_t seed, uint32_t device, uint32_t incarnation);
  uint64_t next();
  double uniform();  // [0, 1)

 private:
  uint64_t state_;
};

struct FailureDraw {
  double at_s = 0;      // absolute time of the failure
  size_t category = 0;  // index into FailureModel::categories
  bool precursor = false;
};

// The next failure of a device installed at `install_s` (its age starts
// there; a Weibull hazard whose cumulative value over `horizon_s` is the
// model's rate times the horizon) that has survived to `now_s`, or nullopt
// when it falls past the horizon.
std::optional<FailureDraw> draw_failure(const FailureModel& m, double install_s, double now_s,
                                        double horizon_s, uint64_t seed, uint32_t device,
                                        uint32_t incarnation);

// A straggler or slow-link episode: on `device` from `at_s` for `hours`.
struct DegradeDraw {
  double at_s = 0;
  uint32_t device = 0;
  bool link = false;  // a slow link, else a straggler
};

// Every degradation of the scenario, in time order: a Poisson process per
// kind over the whole cluster (devices drawn uniformly), from streams of
// their own so that failures draw the same numbers with or without them.
std::vector<DegradeDraw> draw_degradations(const Scenario& s);

}  // namespace sigma::sim::detail
