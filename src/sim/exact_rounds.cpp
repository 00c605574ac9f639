#include "exact_rounds.hpp"

#include "engine.hpp"

#include <algorithm>

namespace sigma::sim::detail {

bool ExactRounds::fault(const std::string& cause, double t, double detect_s, uint64_t at_step) {
  // The step to get back to: the furthest the job got, which a round still
  // recomputing knows better than the rolled-back progress.
  uint64_t reached = at_step;
  if (round_.active()) reached = std::max(reached, round_.reached());
  const bool fresh = round_.fault(cause, t, false, t + detect_s, reached);
  joined_ += fresh ? 0 : 1;
  return fresh;
}

void ExactRounds::assigned(double t, uint64_t index, runtime::RestoreTier tier) {
  if (round_.active() && !round_.assigned()) round_.assigned(t, index, tier);
}

void ExactRounds::rejoined(double t, double restart_s, double restore_s) {
  if (!round_.active() || !round_.assigned() || round_.rejoined()) return;
  round_.rejoined(t, ++generation_, restart_s, restore_s);
}

std::optional<uint64_t> ExactRounds::recomputing_to() const {
  if (round_.active() && round_.rejoined()) return round_.reached();
  return std::nullopt;
}

void ExactRounds::back(double t) {
  if (!recomputing_to()) return;
  back_s_.push_back(t - round_.fault_s());
  round_.recovered(t);
}

LatencyFigures ExactRounds::recovery() const { return latency_figures(back_s_); }

}  // namespace sigma::sim::detail
