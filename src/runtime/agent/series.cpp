#include "runtime/agent/series.hpp"

#include <cmath>

namespace sigma::runtime::agent {

namespace {

void keep_bounded(std::deque<nlohmann::json>& d) {
  if (d.size() < Series::kMaxPoints) return;
  std::deque<nlohmann::json> half;
  for (size_t i = 0; i < d.size(); i += 2) half.push_back(std::move(d[i]));
  d.swap(half);
}

nlohmann::json number_or_null(double x) {
  return std::isfinite(x) ? nlohmann::json(x) : nlohmann::json(nullptr);
}

}  // namespace

void Series::step(double t, const protocol::StepDone& m) {
  nlohmann::json p = {{"t", t}, {"step", m.step}, {"seconds", m.seconds}};
  if (m.loss) p["loss"] = number_or_null(*m.loss);
  if (m.tokens) p["tokens"] = m.tokens;
  if (m.flops > 0) p["flops"] = m.flops;
  if (m.peak_flops > 0) p["peak_flops"] = m.peak_flops;
  steps_.push_back(std::move(p));
  keep_bounded(steps_);
}

void Series::note(double t, uint64_t step, const std::string& note) {
  notes_.push_back({{"t", t}, {"step", step}, {"note", note}});
  keep_bounded(notes_);
}

void Series::devices(double t, const MetricsSnapshot& snapshot) {
  for (const auto& d : snapshot.devices) {
    // A device out of the job (cordoned, retired) no longer reports: its
    // last heartbeat's figures are not a reading.
    if (d.state != scheduler::DeviceState::in_use && d.state != scheduler::DeviceState::available) continue;
    nlohmann::json p = {{"t", t},
                        {"device", d.device},
                        {"health", health::state_name(d.health)},
                        {"state", scheduler::state_name(d.state)},
                        {"score", d.score}};
    for (const auto& s : d.telemetry) {
      if (s.status != HAL_OK) continue;
      if (s.id == HAL_FIELD_TEMPERATURE_C) p["temperature_c"] = number_or_null(s.value.f64);
      if (s.id == HAL_FIELD_POWER_W) p["power_w"] = number_or_null(s.value.f64);
    }
    samples_.push_back(std::move(p));
  }
  keep_bounded(samples_);
}

nlohmann::json Series::to_json() const {
  return {{"steps", nlohmann::json(steps_)},
          {"devices", nlohmann::json(samples_)},
          {"notes", nlohmann::json(notes_)}};
}

}  // namespace sigma::runtime::agent
