#include "policy.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace sigma::guardrails::detail {

LossScaler::LossScaler(const LossScalingConfig& c) : c_(c), scale_(c.enabled ? c.initial_scale : 1.0) {}

double LossScaler::update(bool overflow) {
  if (!c_.enabled) return scale_;
  if (overflow) {
    scale_ = std::max(c_.min_scale, scale_ * c_.backoff_factor);
    clean_ = 0;
  } else if (++clean_ >= c_.growth_interval) {
    scale_ = std::min(c_.max_scale, scale_ * c_.growth_factor);
    clean_ = 0;
  }
  return scale_;
}

namespace {
double median(std::vector<double> v) {
  const size_t mid = v.size() / 2;
  std::nth_element(v.begin(), v.begin() + static_cast<long>(mid), v.end());
  const double hi = v[mid];
  if (v.size() % 2) return hi;
  return (hi + *std::max_element(v.begin(), v.begin() + static_cast<long>(mid))) / 2;
}
}  // namespace

SpikeDetector::Verdict SpikeDetector::judge(double loss) const {
  Verdict v;
  if (!c_.enabled || history_.size() < std::max<uint64_t>(c_.min_history, 1)) return v;
  std::vector<double> x;
  x.reserve(history_.size());
  for (const auto& h : history_) x.push_back(h.second);
  v.median = median(x);
  for (double& d : x) d = std::fabs(d - v.median);
  v.mad = median(std::move(x));
  // 1.4826 * MAD estimates the standard deviation of normal data; the
  // relative floor keeps a flat history (MAD 0) from calling noise a spike.
  v.limit =
      std::max(v.median + c_.threshold * 1.4826 * v.mad, v.median + c_.min_relative * std::fabs(v.median));
  v.spike = loss > v.limit;
  return v;
}

void SpikeDetector::accept(uint64_t step, double loss) {
  history_.emplace_back(step, loss);
  while (history_.size() > c_.window) history_.pop_front();
}

void SpikeDetector::rewind(uint64_t step) {
  while (!history_.empty() && history_.back().first > step) history_.pop_back();
}

bool SpikeDetector::record_spike(uint64_t step) {
  spikes_.push_back(step);
  while (!spikes_.empty() && spikes_.front() + c_.escalate_within < step) spikes_.pop_front();
  if (c_.escalate_after == 0 || spikes_.size() < c_.escalate_after) return false;
  spikes_.clear();  // one escalation per burst
  return true;
}

double LayerPrecision::top() const { return low_ == HAL_DTYPE_F16 ? 65504.0 : 3.3895313892515355e38; }

double LayerPrecision::headroom_bits(double amax) const {
  if (!std::isfinite(amax)) return -INFINITY;
  return amax > 0 ? std::log2(top() / amax) : INFINITY;
}

LayerPrecision::Verdict LayerPrecision::observe(bool overflow, double amax, double activation_amax) {
  Verdict v;
  // An activation past the format's range became inf where it was rounded.
  overflow = overflow || !(activation_amax <= top());
  window_.push_back(overflow);
  overflows_ += overflow;
  while (window_.size() > c_.window) overflows_ -= window_.front(), window_.pop_front();
  if (!c_.enabled || low_ == HAL_DTYPE_F32) return v;
  const double grad_room = headroom_bits(amax), act_room = headroom_bits(activation_amax);
  const bool by_activation = act_room < grad_room;
  const double headroom = std::min(grad_room, act_room);
  char buf[224];
  if (!escalated_) {
    const auto limit =
        std::max<uint64_t>(1, static_cast<uint64_t>(std::ceil(c_.max_overflow_rate * c_.window)));
    if (overflows_ >= limit) {
      std::snprintf(buf, sizeof buf, "%llu overflowing steps in the last %zu (limit %llu)",
                    static_cast<unsigned long long>(overflows_), window_.size(),
                    static_cast<unsigned long long>(limit));
    } else if (!std::isfinite(activation_amax)) {
      std::snprintf(buf, sizeof buf, "an activation overflowed %s's %.6g (not finite)",
                    low_ == HAL_DTYPE_F16 ? "f16" : "bf16", top());
    } else if (headroom < c_.min_headroom_bits) {
      std::snprintf(
          buf, sizeof buf, "%s amax %.4g leaves %.2f bits of headroom below %s's %.6g (minimum %.2f)",
          by_activation ? "activation" : "unscaled gradient", by_activation ? activation_amax : amax,
          headroom, low_ == HAL_DTYPE_F16 ? "f16" : "bf16", top(), c_.min_headroom_bits);
    } else {
      return v;
    }
    force_escalate();
    v.change = Change::escalate;
    v.why = buf;
    return v;
  }
  calm_ = overflow || headroom < c_.min_headroom_bits + 1 ? 0 : calm_ + 1;
  if (calm_ < c_.calm_steps) return v;
  std::snprintf(buf, sizeof buf, "calm for %llu steps, headroom %.2f bits",
                static_cast<unsigned long long>(calm_), headroom);
  escalated_ = false;
  calm_ = 0;
  window_.clear();
  overflows_ = 0;
  v.change = Change::deescalate;
  v.why = buf;
  return v;
}

void LayerPrecision::force_escalate() {
  escalated_ = true;
  calm_ = 0;
  window_.clear();
  overflows_ = 0;
}

void LayerPrecision::restore(const State& s) {
  escalated_ = s.escalated;
  calm_ = s.calm;
  window_.assign(s.window.begin(), s.window.end());
  while (window_.size() > c_.window) window_.pop_front();
  overflows_ = static_cast<uint64_t>(std::count(window_.begin(), window_.end(), true));
}

}  // namespace sigma::guardrails::detail
