// The spare pool each policy keeps (engine.hpp), from the failure model
// the simulator draws from.
#include "engine.hpp"

#include <sigma/error.hpp>

#include <algorithm>
#include <cmath>
#include <limits>

namespace sigma::sim::detail {
namespace {

// log(k!) through lgamma_r: std::lgamma writes the global signgam, a data
// race between a sweep's threads.
double log_factorial(double k) {
  int sign = 0;
  return ::lgamma_r(k + 1.0, &sign);
}

// Poisson(m) probabilities for 0..n (log space: exp(-m) underflows for large m).
std::vector<double> poisson_pmf(double m, size_t n) {
  std::vector<double> p(n + 1, 0.0);
  for (size_t k = 0; k <= n; ++k)
    p[k] = m > 0 ? std::exp(-m + static_cast<double>(k) * std::log(m) - log_factorial(static_cast<double>(k)))
                 : (k == 0 ? 1.0 : 0.0);
  return p;
}

// P(exactly x accelerators out of service) for x < the returned size, in
// one repair window where `events` failures are expected: D + per_node x N
// accelerators, D and N Poisson (device and node failures). Truncated ten
// standard deviations past the mean.
std::vector<double> out_of_service(double events, double dev_share, double node_share, double extra,
                                   uint32_t per_node, size_t n) {
  const double mu_d = events * dev_share + extra, mu_n = events * node_share;
  const double mean = mu_d + per_node * mu_n, sd = std::sqrt(mu_d + double(per_node) * per_node * mu_n);
  const size_t len = std::min<size_t>(n + 1, static_cast<size_t>(mean + 10 * sd + 2.0 * per_node + 16));
  const auto pd = poisson_pmf(mu_d, len), pn = poisson_pmf(mu_n, len / per_node + 1);
  std::vector<double> out(len, 0.0);
  for (size_t j = 0; j < pn.size() && j * per_node < len; ++j)
    for (size_t i = 0; i + j * per_node < len; ++i) out[i + j * per_node] += pd[i] * pn[j];
  return out;
}

// The accelerators out of service at once in each repair window of the
// job: P(x out) for x below each vector's size. The job is cut into repair
// windows, each with the failures the Weibull hazard puts there (infant
// mortality: many in the first, fewer later). A policy that migrates on
// warnings also sends stragglers and slow links away: they count as
// device outages too (on average rate x duration of them at once).
std::vector<std::vector<double>> windows_out(const Scenario& s, const Policy& p) {
  const FailureModel& f = s.failures;
  const double dev = scope_share(f, Scope::device), node = scope_share(f, Scope::node);
  if (dev + node <= 0) return {};
  const double horizon = s.days * 86400.0, window = f.repair_hours * 3600.0;
  const double per_device = f.per_accelerator_day * f.rate_multiplier / 86400.0 * horizon;  // H(horizon)
  auto hazard = [&](double t) {
    return per_device * std::pow(std::min(t, horizon) / horizon, f.weibull_shape);
  };
  const double degraded_out = p.migrate_on_warning
                                  ? s.accelerators *
                                        (f.straggler_per_accelerator_day * f.straggler_hours +
                                         f.slow_link_per_accelerator_day * f.slow_link_hours) /
                                        24.0
                                  : 0;
  std::vector<std::vector<double>> out;
  for (double t0 = 0; t0 < horizon; t0 += window) {
    const double events = s.accelerators * (hazard(t0 + window) - hazard(t0));
    out.push_back(out_of_service(events, dev, node, degraded_out, s.per_node, s.accelerators));
  }
  return out;
}

// Each window's P(at most x out), from its P(x out).
std::vector<std::vector<double>> cumulative(std::vector<std::vector<double>> windows) {
  for (auto& w : windows)
    for (size_t x = 1; x < w.size(); ++x) w[x] += w[x - 1];
  return windows;
}

// The chance that some window has more accelerators out than k spares.
double shortfall_risk(const std::vector<std::vector<double>>& cdfs, size_t k) {
  double fine = 1;
  for (const auto& c : cdfs) fine *= k < c.size() ? std::min(1.0, c[k]) : 1.0;
  return 1.0 - fine;
}

// The smallest pool that runs out with at most `risk` over the job. The
// scheduler's size_spares assumes single-device failures at a constant
// rate; a node's block of eight and early-life hazard both break that, so
// the simulator sizes with the model it draws from.
uint32_t risk_spares(const Scenario& s, const std::vector<std::vector<double>>& windows, double risk) {
  const auto cdfs = cumulative(windows);
  size_t len = 1;
  for (const auto& c : cdfs) len = std::max(len, c.size());
  for (size_t k = 0; k < len; ++k)
    if (shortfall_risk(cdfs, k) <= risk) return static_cast<uint32_t>(k);
  return static_cast<uint32_t>(std::min<size_t>(len, s.accelerators));
}

// Contained recovery: running out stops one replica, not the job, so the
// pool is the one that costs least in expectation. Each window, a spare
// that waits idles one accelerator, and each accelerator short leaves its
// replica of `replica_size` waiting (degraded) until a device returns,
// assumed the window's length. The world is whole replicas: the pool is
// what is left over plus whole replicas' worth.
uint32_t contained_spares(const Scenario& s, const Policy& p,
                          const std::vector<std::vector<double>>& windows) {
  const uint32_t n = s.accelerators, m = p.replica_size;
  double best = std::numeric_limits<double>::infinity();
  uint32_t pick = n % m;
  for (uint32_t k = n % m; k < n; k += m) {
    double cost = 0;
    for (const auto& pmf : windows)
      for (size_t x = 0; x < pmf.size(); ++x) cost += pmf[x] * (x < k ? double(k - x) : double(x - k) * m);
    if (cost < best)
      best = cost, pick = k;
    else
      break;  // convex in k: past the least
  }
  return pick;
}

}  // namespace

double scope_share(const FailureModel& f, Scope scope) {
  double all = 0, of = 0;
  for (const Category& c : f.categories) {
    all += c.weight;
    if (c.scope == scope) of += c.weight;
  }
  return all > 0 ? of / all : 0;
}

SparePool spare_pool(const Scenario& s, const Policy& p) {
  const uint32_t n = s.accelerators;
  const auto windows = windows_out(s, p);
  uint32_t k = 0;
  if (p.spares == SpareRule::count) {
    k = p.spare_count;
  } else if (p.spares == SpareRule::fraction) {
    k = static_cast<uint32_t>(std::ceil(p.spare_fraction * n));
  } else if (p.spares == SpareRule::model) {
    k = p.replica_size > 0 ? contained_spares(s, p, windows) : risk_spares(s, windows, p.spare_risk);
  }
  if (k >= n)
    throw Error(Code::invalid_argument, "policy '" + p.name + "' keeps " + std::to_string(k) + " spares of " +
                                            std::to_string(n) + " accelerators");
  // Contained: whole replicas; the accelerators left over are spares too.
  if (p.replica_size > 0) {
    const uint32_t world = (n - k) / p.replica_size * p.replica_size;
    if (world == 0)
      throw Error(Code::invalid_argument, "policy '" + p.name + "': " + std::to_string(n - k) +
                                              " accelerators left beside the spares hold no replica of " +
                                              std::to_string(p.replica_size));
    k = n - world;
  }
  return {k, shortfall_risk(cumulative(windows), k)};
}

}  // namespace sigma::sim::detail
