// What the agent's decisions produce besides commands, as plain data: the
// goodput ledger, the metrics snapshot, and the journal lines for the
// scheduler's actions and the health monitor's events. Pure.
#pragma once

#include <sigma/health.hpp>
#include <sigma/scheduler.hpp>

#include "journal_records.hpp"
#include "runtime/agent/inbound.hpp"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace sigma::runtime::agent {

// Time lost, by cause. Everything is wall seconds of the whole job.
struct Ledger {
  double detection_s = 0;  // fault -> noticed
  double restart_s = 0;    // noticed -> every rank back in a communicator (minus restore)
  double restore_s = 0;    // loading the agreed state
  uint64_t recomputed_steps = 0;
  double recompute_s = 0;    // recomputed steps x median step time
  double slow_steps_s = 0;   // time of steps above 1.5x the median, beyond the median
  double idle_spares_s = 0;  // device-seconds spares waited
  uint64_t steps_run = 0;    // rank 0's steps, recomputed ones included
  nlohmann::json to_json(double wall_s) const;
};

struct MetricsSnapshot {
  uint64_t steps = 0;
  // Tokens rank 0 reported (StepDone.tokens) over the steps it finished,
  // recomputed steps again: the work done, for a rate (its host fills it in).
  uint64_t tokens = 0;
  double wall_s = 0;
  size_t incidents = 0;
  size_t spares = 0;
  Ledger ledger;
  struct Device {
    uint32_t device;
    double score;
    health::State health;
    scheduler::DeviceState state;
    // The latest telemetry a heartbeat carried (fields without a value
    // have a status other than HAL_OK).
    std::vector<hal_telemetry_sample_t> telemetry{};
  };
  std::vector<Device> devices;
  Inbound inbound;  // what the agent read (its host fills it in)
};

// The journal line of a scheduler action / a health event.
nlohmann::json record_of(const scheduler::Action& a);
nlohmann::json record_of(const health::Event& e);

}  // namespace sigma::runtime::agent
