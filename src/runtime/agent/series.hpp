// The job's time series for the report: what rank 0 said of each step
// (time, loss, tokens), each device's temperature, power and health once a
// second, and the numerics decisions the workers reported. Plain data; the
// host feeds it, the report reads report.json's "series".
// Thread-safety: the agent's thread only.
#pragma once

#include "runtime/agent/records.hpp"
#include "runtime/protocol.hpp"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <deque>
#include <string>

namespace sigma::runtime::agent {

class Series {
 public:
  // Points kept per series: past this, every other point is dropped (the
  // plot keeps its shape, the memory stays bounded on long jobs).
  static constexpr size_t kMaxPoints = 20000;

  void step(double t, const protocol::StepDone& m);
  void note(double t, uint64_t step, const std::string& note);
  void devices(double t, const MetricsSnapshot& snapshot);
  nlohmann::json to_json() const;

 private:
  std::deque<nlohmann::json> steps_, samples_;
  std::deque<nlohmann::json> notes_;
};

}  // namespace sigma::runtime::agent
