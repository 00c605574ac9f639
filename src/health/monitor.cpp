// The health monitor's detectors. Each evaluate() recomputes, per device, the
// set of conditions that hold now; a condition that newly holds raises a
// warning, one that has not held for clear_after_s clears it. The device's
// state is the most severe active warning.
#include <sigma/health.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <deque>

namespace sigma::health {

const char* state_name(State s) noexcept {
  switch (s) {
    case State::healthy:
      return "healthy";
    case State::suspect:
      return "suspect";
    case State::failing:
      return "failing";
    case State::failed:
      return "failed";
  }
  return "unknown";
}

void validate(const Config& c) {
  auto need = [](bool ok, const char* field, const char* why) {
    if (!ok) throw Error(Code::invalid_argument, std::string("health config: ") + field + ": " + why);
  };
  need(c.history_samples >= 8, "history_samples", "must be at least 8");
  need(std::isfinite(c.warn_c) && std::isfinite(c.critical_c) && c.critical_c > c.warn_c, "critical_c",
       "must be finite and above warn_c");
  need(c.ewma_alpha > 0 && c.ewma_alpha <= 1, "ewma_alpha", "must be in (0, 1]");
  need(c.trend_window_s > 0, "trend_window_s", "must be positive");
  need(c.trend_horizon_s > 0, "trend_horizon_s", "must be positive");
  need(c.trend_min_slope_c_per_s > 0, "trend_min_slope_c_per_s", "must be positive");
  need(c.ecc_window_s > 0 && c.ecc_per_min_suspect > 0, "ecc_window_s", "window and rate must be positive");
  need(c.link_window_s > 0 && c.link_errors_per_min_suspect > 0, "link_window_s",
       "window and rate must be positive");
  need(c.straggler_ratio > 1, "straggler_ratio", "must be above 1");
  need(c.straggler_min_excess_s >= 0, "straggler_min_excess_s", "must not be negative");
  need(c.straggler_min_steps >= 1 && c.straggler_window_steps >= c.straggler_min_steps,
       "straggler_window_steps", "must be at least straggler_min_steps (>= 1)");
  need(c.heartbeat_timeout_s > 0, "heartbeat_timeout_s", "must be positive");
  need(c.clear_after_s >= 0, "clear_after_s", "must not be negative");
}

Config time_scaled(const Config& config, double k) {
  if (!(k > 0) || !std::isfinite(k))
    throw Error(Code::invalid_argument,
                "health config: time scale " + std::to_string(k) + " must be a positive finite number");
  if (k == 1) return config;
  Config c = config;
  c.trend_window_s = std::max(0.5, config.trend_window_s / k);
  c.trend_horizon_s = config.trend_horizon_s / k;
  c.trend_min_slope_c_per_s = config.trend_min_slope_c_per_s * k;
  c.ecc_window_s = std::max(1.0, config.ecc_window_s / k);
  c.ecc_per_min_suspect = config.ecc_per_min_suspect * k;
  c.link_window_s = std::max(1.0, config.link_window_s / k);
  c.link_errors_per_min_suspect = config.link_errors_per_min_suspect * k;
  c.clear_after_s = config.clear_after_s / k;
  return c;
}

namespace {

struct Point {
  double t;
  double v;
};

struct DeviceData {
  std::deque<Point> temp_ewma;  // (t, EWMA of temperature)
  std::deque<Point> ecc_corr;   // (t, cumulative count)
  std::deque<Point> link_err;
  std::optional<double> ecc_unc_first, ecc_unc_last;
  uint64_t throttle = 0;
  int64_t fatal_code = 0;
  std::deque<double> step_times;
  std::optional<double> last_heartbeat;
  std::vector<std::pair<Code, std::string>> new_errors;  // since the last evaluate
  std::optional<Warning> failure;                        // sticky until reset
  std::map<hal_field_id_t, bool> non_finite;             // field -> its last OK sample was NaN/Inf
  struct Active {
    Warning w;
    double last_true;
  };
  std::map<std::string, Active> active;  // key: signal/rule
  State state = State::healthy;
};

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  const size_t mid = v.size() / 2;
  std::nth_element(v.begin(), v.begin() + static_cast<long>(mid), v.end());
  double m = v[mid];
  if (v.size() % 2 == 0) m = (m + *std::max_element(v.begin(), v.begin() + static_cast<long>(mid))) / 2;
  return m;
}

std::string fmt(const char* f, double a, double b = 0, double c = 0) {
  char buf[256];
  std::snprintf(buf, sizeof buf, f, a, b, c);
  return buf;
}

// Least-squares slope of the points with t >= from, once they span at least
// min_span (a fit over a few early samples would chase the EWMA's start).
std::optional<double> slope_since(const std::deque<Point>& pts, double from, size_t min_points,
                                  double min_span) {
  double n = 0, st = 0, sv = 0, stt = 0, stv = 0, t_first = 0;
  for (const Point& p : pts) {
    if (p.t < from) continue;
    if (n == 0) t_first = p.t;
    n += 1;
    st += p.t;
    sv += p.v;
    stt += p.t * p.t;
    stv += p.t * p.v;
  }
  if (n < static_cast<double>(min_points) || pts.back().t - t_first < min_span) return std::nullopt;
  const double den = n * stt - st * st;
  if (!(den > 0)) return std::nullopt;
  return (n * stv - st * sv) / den;
}

// Events per minute over the points within `window` of `now` (cumulative
// counter); nullopt when the points span less than a second.
std::optional<double> rate_per_min(const std::deque<Point>& pts, double now, double window) {
  const Point* first = nullptr;
  for (const Point& p : pts) {
    if (p.t >= now - window) {
      first = &p;
      break;
    }
  }
  if (first == nullptr || pts.empty()) return std::nullopt;
  const Point& last = pts.back();
  const double span = last.t - first->t;
  // Judged only over a quarter of the window at least: one background error
  // in the first second is not 60 a minute.
  if (span < std::max(1.0, 0.25 * window)) return std::nullopt;
  return std::max(0.0, last.v - first->v) / span * 60.0;
}

void push_bounded(std::deque<Point>& d, Point p, size_t cap) {
  d.push_back(p);
  while (d.size() > cap) d.pop_front();
}

Warning make(uint32_t dev, const char* signal, const char* rule, State sev, double value, double threshold,
             std::string message) {
  Warning w;
  w.device = dev;
  w.signal = signal;
  w.rule = rule;
  w.severity = sev;
  w.value = value;
  w.threshold = threshold;
  w.message = std::move(message);
  return w;
}

double score_of(State s, size_t warnings) {
  switch (s) {
    case State::healthy:
      return 1.0;
    case State::suspect:
      return std::max(0.4, 0.7 - 0.1 * static_cast<double>(warnings - 1));
    case State::failing:
      return 0.2;
    case State::failed:
      return 0.0;
  }
  return 0.0;
}

}  // namespace

struct Monitor::Impl {
  mutable std::mutex mu;
  std::map<uint32_t, DeviceData> devices;

  DeviceData& dev(uint32_t id) { return devices[id]; }

  std::vector<Warning> conditions(const Config& c, uint32_t id, DeviceData& d, double now) {
    std::vector<Warning> out;
    if (d.failure) out.push_back(*d.failure);
    if (!d.temp_ewma.empty()) {
      const double temp = d.temp_ewma.back().v;
      if (temp >= c.critical_c) {
        out.push_back(make(id, "temperature", "threshold", State::failing, temp, c.critical_c,
                           fmt("temperature %.1f C at or above the critical %.1f C", temp, c.critical_c)));
      } else if (temp >= c.warn_c) {
        out.push_back(make(id, "temperature", "threshold", State::suspect, temp, c.warn_c,
                           fmt("temperature %.1f C at or above the warning %.1f C", temp, c.warn_c)));
      }
      if (temp < c.critical_c) {
        if (auto slope = slope_since(d.temp_ewma, now - c.trend_window_s, 5, c.trend_window_s / 2);
            slope && *slope >= c.trend_min_slope_c_per_s) {
          const double eta = (c.critical_c - temp) / *slope;
          if (eta <= c.trend_horizon_s) {
            Warning w = make(
                id, "temperature", "trend", State::suspect, temp, c.critical_c,
                fmt("temperature %.1f C rising %.2f C/s: crosses %.1f C in ~", temp, *slope, c.critical_c) +
                    fmt("%.0f s", eta));
            w.eta_s = eta;
            out.push_back(std::move(w));
          }
        }
      }
    }
    if (d.throttle & HAL_THROTTLE_THERMAL) {
      out.push_back(make(id, "throttle", "threshold", State::suspect, 1, 0, "thermal throttling"));
    }
    if (d.fatal_code != 0) {
      out.push_back(make(id, "fatal_code", "threshold", State::failing, static_cast<double>(d.fatal_code), 0,
                         fmt("fatal code %.0f reported", static_cast<double>(d.fatal_code))));
    }
    if (d.ecc_unc_first && d.ecc_unc_last && *d.ecc_unc_last > *d.ecc_unc_first) {
      const double n = *d.ecc_unc_last - *d.ecc_unc_first;
      out.push_back(make(id, "ecc_uncorrectable", "threshold", State::failing, n, 0,
                         fmt("%.0f uncorrectable ECC error(s) since monitoring began", n)));
    }
    if (auto r = rate_per_min(d.ecc_corr, now, c.ecc_window_s); r && *r >= c.ecc_per_min_suspect) {
      out.push_back(make(id, "ecc_correctable", "ecc_rate", State::suspect, *r, c.ecc_per_min_suspect,
                         fmt("%.1f correctable ECC errors/min (limit %.1f)", *r, c.ecc_per_min_suspect)));
    }
    if (auto r = rate_per_min(d.link_err, now, c.link_window_s); r && *r >= c.link_errors_per_min_suspect) {
      out.push_back(make(id, "link_errors", "link_rate", State::suspect, *r, c.link_errors_per_min_suspect,
                         fmt("%.1f link errors/min (limit %.1f)", *r, c.link_errors_per_min_suspect)));
    }
    if (d.step_times.size() >= c.straggler_min_steps) {
      std::vector<double> peers;
      for (auto& [pid, pd] : devices) {
        if (pid == id || pd.step_times.size() < c.straggler_min_steps || pd.failure) continue;
        peers.push_back(median({pd.step_times.begin(), pd.step_times.end()}));
      }
      if (!peers.empty()) {
        const double own = median({d.step_times.begin(), d.step_times.end()});
        const double ref = median(peers);
        if (ref > 0 && own / ref >= c.straggler_ratio && own - ref >= c.straggler_min_excess_s) {
          out.push_back(make(id, "step_time", "straggler", State::suspect, own / ref, c.straggler_ratio,
                             fmt("median step %.4f s is %.2fx its peers' %.4f s", own, own / ref, ref)));
        }
      }
    }
    if (d.last_heartbeat && now - *d.last_heartbeat > c.heartbeat_timeout_s && !d.failure) {
      Warning w = make(
          id, "heartbeat", "heartbeat", State::failed, now - *d.last_heartbeat, c.heartbeat_timeout_s,
          fmt("no heartbeat for %.2f s (timeout %.2f s)", now - *d.last_heartbeat, c.heartbeat_timeout_s));
      w.since_s = now;
      d.failure = w;
      out.push_back(std::move(w));
    }
    for (const auto& [field, bad] : d.non_finite) {
      if (!bad) continue;
      out.push_back(make(id, "sensor", "non_finite", State::suspect, 0, 0,
                         "telemetry field " + std::to_string(field) +
                             " reads NaN or Inf with HAL_OK: a sensor failure, not a reading"));
    }
    for (auto& [code, what] : d.new_errors) {
      out.push_back(
          make(id, "collective", "error", State::suspect, 0, 0, std::string(code_name(code)) + ": " + what));
    }
    d.new_errors.clear();
    return out;
  }
};

Monitor::Monitor(Config config) : config_(config), impl_(std::make_unique<Impl>()) { validate(config_); }
Monitor::~Monitor() = default;

void Monitor::add_device(uint32_t device) {
  std::lock_guard<std::mutex> lk(impl_->mu);
  impl_->dev(device);
}

void Monitor::observe_telemetry(uint32_t device, double t_s, const hal_telemetry_sample_t* samples,
                                size_t n) {
  std::lock_guard<std::mutex> lk(impl_->mu);
  DeviceData& d = impl_->dev(device);
  const size_t cap = config_.history_samples;
  for (size_t i = 0; i < n; ++i) {
    const hal_telemetry_sample_t& s = samples[i];
    if (s.status == HAL_ERR_DEVICE_LOST && !d.failure) {
      Warning w = make(device, "telemetry", "device_lost", State::failed, 0, 0,
                       "telemetry read reports the device lost");
      w.since_s = t_s;
      d.failure = w;
      continue;
    }
    if (s.status != HAL_OK) continue;
    const double v = s.type == HAL_VALUE_F64   ? s.value.f64
                     : s.type == HAL_VALUE_I64 ? static_cast<double>(s.value.i64)
                                               : static_cast<double>(s.value.u64);
    // A NaN or Inf reported as a good reading is a broken sensor, not a
    // value: it is kept out of every signal and raised on its own.
    d.non_finite[s.id] = !std::isfinite(v);
    if (!std::isfinite(v)) continue;
    switch (s.id) {
      case HAL_FIELD_TEMPERATURE_C: {
        if (!std::isfinite(v)) break;
        const double prev = d.temp_ewma.empty() ? v : d.temp_ewma.back().v;
        push_bounded(d.temp_ewma, {t_s, prev + config_.ewma_alpha * (v - prev)}, cap);
        break;
      }
      case HAL_FIELD_ECC_CORRECTABLE:
        push_bounded(d.ecc_corr, {t_s, v}, cap);
        break;
      case HAL_FIELD_LINK_ERRORS:
        push_bounded(d.link_err, {t_s, v}, cap);
        break;
      case HAL_FIELD_ECC_UNCORRECTABLE:
        if (!d.ecc_unc_first) d.ecc_unc_first = v;
        d.ecc_unc_last = v;
        break;
      case HAL_FIELD_THROTTLE_REASONS:
        d.throttle = s.value.u64;
        break;
      case HAL_FIELD_FATAL_CODE:
        d.fatal_code = s.value.i64;
        break;
      default:
        break;
    }
  }
}

void Monitor::observe_step(uint32_t device, uint64_t /*step*/, double step_time_s, double /*t_s*/) {
  if (!(step_time_s >= 0) || !std::isfinite(step_time_s)) return;
  std::lock_guard<std::mutex> lk(impl_->mu);
  DeviceData& d = impl_->dev(device);
  d.step_times.push_back(step_time_s);
  while (d.step_times.size() > config_.straggler_window_steps) d.step_times.pop_front();
}

void Monitor::observe_heartbeat(uint32_t device, double t_s) {
  std::lock_guard<std::mutex> lk(impl_->mu);
  DeviceData& d = impl_->dev(device);
  if (!d.last_heartbeat || t_s > *d.last_heartbeat) d.last_heartbeat = t_s;
}

void Monitor::observe_error(uint32_t device, Code code, const std::string& what, double t_s) {
  std::lock_guard<std::mutex> lk(impl_->mu);
  DeviceData& d = impl_->dev(device);
  if (code == Code::device_lost || code == Code::internal) {
    if (!d.failure) {
      Warning w = make(device, code == Code::device_lost ? "device" : "process",
                       code == Code::device_lost ? "device_lost" : "exit", State::failed, 0, 0, what);
      w.since_s = t_s;
      d.failure = w;
    }
    return;
  }
  d.new_errors.emplace_back(code, what);
}

std::vector<Event> Monitor::evaluate(double t_s) {
  std::lock_guard<std::mutex> lk(impl_->mu);
  std::vector<Event> events;
  for (auto& [id, d] : impl_->devices) {
    std::vector<Warning> now = impl_->conditions(config_, id, d, t_s);
    std::map<std::string, bool> seen;
    for (Warning& w : now) {
      const std::string key = w.signal + "/" + w.rule;
      if (seen[key]) continue;
      seen[key] = true;
      auto it = d.active.find(key);
      if (it == d.active.end()) {
        if (w.since_s == 0) w.since_s = t_s;
        d.active.emplace(key, DeviceData::Active{w, t_s});
        events.push_back({Event::Kind::warning_raised, id, t_s, d.state, d.state, w});
      } else {
        const double since = it->second.w.since_s;
        const State old_sev = it->second.w.severity;
        it->second.w = w;
        it->second.w.since_s = since;
        it->second.w.severity = std::max(old_sev, w.severity);
        it->second.last_true = t_s;
      }
    }
    for (auto it = d.active.begin(); it != d.active.end();) {
      const bool sticky = it->second.w.severity == State::failed;
      if (!seen[it->first] && !sticky && t_s - it->second.last_true >= config_.clear_after_s) {
        events.push_back({Event::Kind::warning_cleared, id, t_s, d.state, d.state, it->second.w});
        it = d.active.erase(it);
      } else {
        ++it;
      }
    }
    State next = State::healthy;
    const Warning* driver = nullptr;
    for (auto& [key, a] : d.active) {
      if (driver == nullptr || a.w.severity > next) {
        next = a.w.severity;
        driver = &a.w;
      }
    }
    if (next != d.state) {
      Event e{Event::Kind::state_changed, id, t_s, d.state, next, {}};
      if (driver) e.warning = *driver;
      events.push_back(std::move(e));
      d.state = next;
    }
  }
  return events;
}

DeviceHealth Monitor::device(uint32_t device) const {
  std::lock_guard<std::mutex> lk(impl_->mu);
  DeviceHealth h;
  h.device = device;
  auto it = impl_->devices.find(device);
  if (it == impl_->devices.end()) return h;
  h.state = it->second.state;
  for (auto& [key, a] : it->second.active) h.warnings.push_back(a.w);
  std::stable_sort(h.warnings.begin(), h.warnings.end(),
                   [](const Warning& a, const Warning& b) { return a.severity > b.severity; });
  h.score = score_of(h.state, h.warnings.size());
  return h;
}

std::vector<DeviceHealth> Monitor::devices() const {
  std::vector<uint32_t> ids;
  {
    std::lock_guard<std::mutex> lk(impl_->mu);
    for (auto& [id, d] : impl_->devices) ids.push_back(id);
  }
  std::vector<DeviceHealth> out;
  for (uint32_t id : ids) out.push_back(device(id));
  return out;
}

void Monitor::reset(uint32_t device) {
  std::lock_guard<std::mutex> lk(impl_->mu);
  impl_->devices[device] = DeviceData{};
}

}  // namespace sigma::health
