#include "runtime/agent/step_watchdog.hpp"

#include <algorithm>

namespace sigma::runtime::agent {

bool StepWatchdog::due(bool watching, uint64_t progress, double t) {
  if (!watching || progress != progress_) {
    progress_ = progress;
    since_ = t;
    return false;
  }
  if (timeout_s_ <= 0 || t - since_ < timeout_s_) return false;
  since_ = t;
  return true;
}

StepWatchdog::Verdict StepWatchdog::judge(const std::vector<std::optional<StepPosition>>& working) {
  if (working.empty()) return {};
  const auto lowest = *std::min_element(working.begin(), working.end());
  const auto highest = *std::max_element(working.begin(), working.end());
  Verdict v;
  v.kind = lowest == highest ? Verdict::Kind::every_rank_stalled : Verdict::Kind::behind;
  v.lowest = lowest;
  v.step = lowest ? lowest->step : 0;
  return v;
}

}  // namespace sigma::runtime::agent
