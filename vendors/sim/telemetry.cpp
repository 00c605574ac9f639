// Synthetic telemetry of an early-life accelerator: a seeded model per
// device (baseline, noise, events from the scenario), read at scenario time.
// Counters are non-decreasing functions of time, so the monotonic fields
// stay monotonic; the same seed and the same reads give the same values.
#include "sim.hpp"

#include <sigma/hal_support.h>

#include <algorithm>
#include <cmath>
#include <cstring>

namespace sim_vendor {
namespace {

uint64_t splitmix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

double uniform(uint64_t key) { return (static_cast<double>(splitmix(key) >> 11) + 0.5) * 0x1.0p-53; }

// Standard normal from two uniforms (Box-Muller), keyed deterministically.
double gauss(uint64_t key) {
  const double u1 = uniform(key), u2 = uniform(key ^ 0xD1B54A32D192ED03ull);
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
}

// Arrivals of a Poisson process with `rate` up to time t, from a seeded
// stream: exponential gaps, each a function of (stream, index) only.
uint64_t poisson_count(double rate, double t, uint64_t stream) {
  if (rate <= 0 || t <= 0) return 0;
  // Cap the work per read: past 1e6 arrivals use the mean.
  if (rate * t > 1e6) return static_cast<uint64_t>(rate * t);
  double at = 0;
  uint64_t n = 0;
  for (;;) {
    at += -std::log(uniform(stream * 0x100000001B3ull + n)) / rate;
    if (at > t) return n;
    ++n;
  }
}

double overlap(double a, double b, double t) { return std::max(0.0, std::min(b, t) - a); }

struct Model {
  const DeviceModel& d;
  double t;
  uint64_t seed;
  uint32_t rank;
  uint64_t seq;

  double noise(const Signal& s, hal_field_id_t id) const {
    return s.noise > 0 ? s.noise * gauss(seed ^ (uint64_t{rank} << 40) ^ (uint64_t{id} << 32) ^ seq) : 0.0;
  }
  double temperature() const {
    double base = d.telemetry.temperature_c.baseline;
    for (const auto& e : d.events) {
      if (e.kind != EventKind::thermal_ramp || t < e.at_s) continue;
      const double frac = e.duration_s > 0 ? std::min(1.0, (t - e.at_s) / e.duration_s) : 1.0;
      base += (e.to - base) * frac;
    }
    return base + noise(d.telemetry.temperature_c, HAL_FIELD_TEMPERATURE_C);
  }
  const Event* spike() const {
    for (const auto& e : d.events)
      if (e.kind == EventKind::power_spike && t >= e.at_s && t < e.at_s + e.duration_s) return &e;
    return nullptr;
  }
  double power() const {
    if (const Event* s = spike()) return s->to;
    return std::max(0.0, d.telemetry.power_w.baseline + noise(d.telemetry.power_w, HAL_FIELD_POWER_W));
  }
  double energy() const {
    const double base = d.telemetry.power_w.baseline;
    double e = base * t;
    for (const auto& ev : d.events)
      if (ev.kind == EventKind::power_spike)
        e += (ev.to - base) * overlap(ev.at_s, ev.at_s + ev.duration_s, t);
    return std::max(0.0, e);
  }
  bool throttled() const { return temperature() >= d.telemetry.throttle_c; }
  uint64_t ecc_correctable() const {
    uint64_t n = poisson_count(d.telemetry.ecc_correctable_per_s, t, seed ^ (uint64_t{rank} << 8) ^ 1);
    for (const auto& e : d.events) {
      if (e.kind != EventKind::ecc_burst || t < e.at_s) continue;
      const double frac = e.duration_s > 0 ? std::min(1.0, (t - e.at_s) / e.duration_s) : 1.0;
      n += static_cast<uint64_t>(std::floor(static_cast<double>(e.count) * frac));
    }
    return n;
  }
  uint64_t ecc_uncorrectable() const {
    uint64_t n = 0;
    for (const auto& e : d.events)
      if (e.kind == EventKind::ecc_uncorrectable && t >= e.at_s) n += e.count;
    return n;
  }
  uint64_t link_errors(const std::vector<ActiveFault>& faults) const {
    double n = static_cast<double>(
        poisson_count(d.telemetry.link_errors_per_s, t, seed ^ (uint64_t{rank} << 8) ^ 2));
    for (const auto& e : d.events) {
      if (e.kind != EventKind::link_error_growth) continue;
      const double end = e.duration_s > 0 ? e.at_s + e.duration_s : 1e300;
      n += e.rate_per_s * overlap(e.at_s, end, t);
    }
    // Each flap of a flapping link drops a burst of frames.
    for (const auto& f : faults)
      if (f.kind == FaultKind::flapping_link && f.from_s >= 0 && f.period_s > 0)
        n += 5.0 * std::floor(overlap(f.from_s, f.until_s, t) / f.period_s);
    return static_cast<uint64_t>(n);
  }
  uint64_t link_retries(const std::vector<ActiveFault>& faults) const {
    double slow = 0;  // a slow link retransmits: 100 retries per second of it
    for (const auto& f : faults)
      if ((f.kind == FaultKind::slow_link || f.kind == FaultKind::slow_bandwidth) && f.from_s >= 0)
        slow += overlap(f.from_s, f.until_s, t);
    return 4 * link_errors(faults) + static_cast<uint64_t>(100.0 * slow);
  }
};

}  // namespace

const std::vector<hal_field_info_t>& sim_fields() {
  // The standard fields this chip models, described as the HAL's companion
  // describes them.
  static const std::vector<hal_field_info_t> fields = [] {
    std::vector<hal_field_info_t> out;
    for (hal_field_id_t id :
         {HAL_FIELD_TEMPERATURE_C, HAL_FIELD_POWER_W, HAL_FIELD_ENERGY_J, HAL_FIELD_CLOCK_COMPUTE_MHZ,
          HAL_FIELD_UTILIZATION_PCT, HAL_FIELD_MEMORY_USED_BYTES, HAL_FIELD_ECC_CORRECTABLE,
          HAL_FIELD_ECC_UNCORRECTABLE, HAL_FIELD_LINK_ERRORS, HAL_FIELD_LINK_RETRIES,
          HAL_FIELD_THROTTLE_REASONS, HAL_FIELD_FATAL_CODE, HAL_FIELD_RETIRED_PAGES}) {
      hal_field_info_t f{};
      hal_standard_field(id, &f);
      out.push_back(f);
    }
    return out;
  }();
  return fields;
}

void synth_read(const hal_field_id_t* ids, uint32_t n, hal_telemetry_sample_t* out) {
  State& s = state();
  std::lock_guard lk(s.mu);
  s.fire_due_locked();
  const double t = s.now_s();
  const uint64_t ts = now_ns();
  const Model m{s.scenario.device(s.rank), t, s.scenario.seed, s.rank, s.read_seq++};
  const auto& fields = sim_fields();
  for (uint32_t i = 0; i < n; ++i) {
    hal_telemetry_sample_t& x = out[i];
    std::memset(&x, 0, sizeof(x));
    x.id = ids[i];
    auto f = std::find_if(fields.begin(), fields.end(), [&](const auto& fi) { return fi.id == ids[i]; });
    if (f == fields.end()) {
      x.status = HAL_ERR_NOT_SUPPORTED;
      continue;
    }
    x.type = f->type;
    if (s.device_lost && ids[i] != HAL_FIELD_FATAL_CODE) {
      x.status = HAL_ERR_DEVICE_LOST;
      continue;
    }
    x.timestamp_ns = ts;
    switch (ids[i]) {
      case HAL_FIELD_TEMPERATURE_C:
        x.value.f64 = m.temperature();
        break;
      case HAL_FIELD_POWER_W:
        x.value.f64 = m.power();
        break;
      case HAL_FIELD_ENERGY_J:
        x.value.f64 = m.energy();
        break;
      case HAL_FIELD_CLOCK_COMPUTE_MHZ:
        x.value.f64 = (m.d.telemetry.clock_mhz.baseline + m.noise(m.d.telemetry.clock_mhz, ids[i])) *
                      (m.throttled() ? 0.5 : 1.0);
        break;
      case HAL_FIELD_UTILIZATION_PCT:
        x.value.f64 = std::clamp(
            m.d.telemetry.utilization_pct.baseline + m.noise(m.d.telemetry.utilization_pct, ids[i]), 0.0,
            100.0);
        break;
      case HAL_FIELD_MEMORY_USED_BYTES:
        x.value.u64 = s.allocated_bytes;
        break;
      case HAL_FIELD_ECC_CORRECTABLE:
        x.value.u64 = m.ecc_correctable();
        break;
      case HAL_FIELD_ECC_UNCORRECTABLE:
        x.value.u64 = m.ecc_uncorrectable();
        break;
      case HAL_FIELD_LINK_ERRORS:
        x.value.u64 = m.link_errors(s.faults);
        break;
      case HAL_FIELD_LINK_RETRIES:
        x.value.u64 = m.link_retries(s.faults);
        break;
      case HAL_FIELD_THROTTLE_REASONS:
        x.value.u64 = (m.throttled() ? HAL_THROTTLE_THERMAL : 0) | (m.spike() ? HAL_THROTTLE_POWER : 0);
        break;
      case HAL_FIELD_FATAL_CODE:
        x.value.i64 = s.device_lost ? 79 : 0;
        break;  // 79: fell off the bus
      case HAL_FIELD_RETIRED_PAGES:
        x.value.u64 = m.ecc_uncorrectable();
        break;
      default:
        break;
    }
    // A value forced through the fault extension wins while it lasts.
    for (const auto& e : s.excursions) {
      if (e.field != ids[i] || t >= e.until_s) continue;
      if (x.type == HAL_VALUE_F64)
        x.value.f64 = e.value;
      else if (x.type == HAL_VALUE_I64)
        x.value.i64 = static_cast<int64_t>(e.value);
      else
        x.value.u64 = static_cast<uint64_t>(std::max(0.0, e.value));
    }
  }
}

}  // namespace sim_vendor
