#include "runtime/agent/step_times.hpp"

#include <algorithm>
#include <vector>

namespace sigma::runtime::agent {

double StepTimes::finished(uint64_t step, double seconds) {
  double& slowest = recent_[step];
  slowest = std::max(slowest, seconds);
  return settle(kRecent);
}

double StepTimes::median() const {
  if (window_.empty()) return 0;
  std::vector<double> v(window_.begin(), window_.end());
  std::nth_element(v.begin(), v.begin() + static_cast<long>(v.size() / 2), v.end());
  return v[v.size() / 2];
}

double StepTimes::settle(size_t keep) {
  double slow = 0;
  while (recent_.size() > keep) {
    const double x = recent_.begin()->second;
    recent_.erase(recent_.begin());
    window_.push_back(x);
    if (window_.size() > kWindow) window_.pop_front();
    const double m = median();
    if (window_.size() >= 10 && x > 1.5 * m) slow += x - m;
  }
  return slow;
}

}  // namespace sigma::runtime::agent
