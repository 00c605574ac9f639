#include "draws.hpp"

#include <algorithm>
#include <cmath>

namespace sigma::sim::detail {
namespace {

uint64_t mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

}  // namespace

Stream::Stream(uint64_t seed, uint32_t device, uint32_t incarnation)
    : state_(mix(mix(seed) ^ (uint64_t{device} << 32 | incarnation))) {}

uint64_t Stream::next() {
  state_ += 0x9E3779B97F4A7C15ull;
  return mix(state_);
}

double Stream::uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }

std::optional<FailureDraw> draw_failure(const FailureModel& m, double install_s, double now_s,
                                        double horizon_s, uint64_t seed, uint32_t device,
                                        uint32_t incarnation) {
  Stream s(seed, device, incarnation);
  const double rate_per_s = m.per_accelerator_day * m.rate_multiplier / 86400.0;
  if (rate_per_s <= 0 || horizon_s <= 0) return std::nullopt;
  // H(t) = (t / scale)^k with H(horizon) = rate * horizon.
  const double k = m.weibull_shape;
  const double scale = horizon_s / std::pow(rate_per_s * horizon_s, 1.0 / k);
  const double e = -std::log1p(-s.uniform());  // Exp(1)
  // Conditional on surviving to now: H(at) = H(age now) + e.
  const double survived = std::max(0.0, now_s - install_s) / scale;
  const double at = install_s + scale * std::pow((survived > 0 ? std::pow(survived, k) : 0.0) + e, 1.0 / k);
  if (!(at < horizon_s)) return std::nullopt;
  FailureDraw d;
  d.at_s = at;
  double total = 0;
  for (const Category& c : m.categories) total += c.weight;
  double u = s.uniform() * total;
  d.category = m.categories.size() - 1;
  for (size_t i = 0; i < m.categories.size(); ++i) {
    if (u < m.categories[i].weight) {
      d.category = i;
      break;
    }
    u -= m.categories[i].weight;
  }
  d.precursor = m.categories[d.category].precursor && s.uniform() < m.precursor_fraction;
  return d;
}

std::vector<DegradeDraw> draw_degradations(const Scenario& s) {
  std::vector<DegradeDraw> out;
  const double horizon = s.days * 86400.0;
  const double rates[2] = {s.failures.straggler_per_accelerator_day,
                           s.failures.slow_link_per_accelerator_day};
  for (int kind = 0; kind < 2; ++kind) {
    const double per_s = rates[kind] * s.accelerators / 86400.0;
    if (!(per_s > 0)) continue;
    Stream st(s.seed, UINT32_MAX - static_cast<uint32_t>(kind), 0);
    for (double t = 0;;) {
      t += -std::log1p(-st.uniform()) / per_s;
      if (!(t < horizon)) break;
      out.push_back({t, static_cast<uint32_t>(st.next() % s.accelerators), kind == 1});
    }
  }
  std::sort(out.begin(), out.end(),
            [](const DegradeDraw& a, const DegradeDraw& b) { return a.at_s < b.at_s; });
  return out;
}

}  // namespace sigma::sim::detail
