// Scenario files of the sim vendor: what an early-life accelerator does to
// each device over time. YAML, validated strictly: every refusal names the
// file, line, key and reason.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace sim_vendor {

// A value with seeded Gaussian noise around a baseline.
struct Signal {
  double baseline = 0;
  double noise = 0;  // standard deviation
};

struct TelemetryModel {
  Signal temperature_c{45, 0.3};
  Signal power_w{250, 2};
  Signal clock_mhz{1800, 0};
  Signal utilization_pct{90, 1};
  double ecc_correctable_per_s = 0;  // Poisson rate
  double link_errors_per_s = 0;      // Poisson rate (retries grow 4x as fast)
  double throttle_c = 90;            // at or above: THERMAL throttle, clock halves
};

enum class EventKind { thermal_ramp, power_spike, ecc_burst, ecc_uncorrectable, link_error_growth };

struct Event {
  EventKind kind;
  double at_s = 0;
  double duration_s = 0;  // 0: instantaneous (or, for growth, until the end)
  double to = 0;          // thermal_ramp (C), power_spike (W)
  uint64_t count = 0;     // ecc_burst, ecc_uncorrectable
  double rate_per_s = 0;  // link_error_growth
};

struct DeviceModel {
  TelemetryModel telemetry;
  std::vector<Event> events;
};

enum class FaultKind {
  device_lost,
  hang,
  slow_link,
  flapping_link,
  silent_corruption,
  crash,
  slow_bandwidth,
  nan_burst
};
const char* fault_kind_name(FaultKind k);

// A link's healthy figures where a slow_link or flapping_link fault gives
// none: about what the cpu vendor's Gloo moves between two processes on
// loopback (docs/vendor-sim.md). A slow link stretches the transfer these
// figures give, not the time an operation waits for its peers.
constexpr double kHealthyLinkGbps = 1.0;
constexpr double kHealthyLinkLatencyUs = 100.0;

struct Fault {
  FaultKind kind;
  uint32_t device = 0;
  std::optional<double> at_s;     // exactly one of at_s, at_op
  std::optional<uint64_t> at_op;  // the device's n-th collective (0-based)
  double duration_s = 0;          // slow/flapping: 0 = until the end
  double factor = 1;              // slow/flapping: each collective's own transfer (latency_us + bytes / gbps)
                      // takes factor x as long; slow_bandwidth: the link moves bytes factor x slower
  double gbps = kHealthyLinkGbps;             // the link's healthy rate, GB/s each way
                                              // (required for slow_bandwidth)
  double latency_us = kHealthyLinkLatencyUs;  // slow/flapping: the healthy per-operation latency
  double period_s = 0;                        // flapping: one slow + one normal phase
  uint64_t count = 1;                         // silent_corruption, nan_burst: how many results
  int op = -1;   // silent_corruption, nan_burst: only results of this hal_coll_op_t (-1: any)
  int line = 0;  // where it was written, for messages
};

struct Scenario {
  std::string file;
  uint64_t seed = 0;
  double duration_s = 0;
  uint32_t world_size = 1;
  double time_scale = 1;  // scenario seconds per real second
  std::string inner = "cpu";
  DeviceModel default_device;
  std::map<uint32_t, DeviceModel> devices;  // overrides, by global rank
  std::vector<Fault> faults;

  const DeviceModel& device(uint32_t rank) const {
    auto it = devices.find(rank);
    return it == devices.end() ? default_device : it->second;
  }
};

// Parses and validates. On failure returns nullopt and sets `error` to
// "FILE:LINE: KEY: reason". `text` is the file's content, `file` its name.
std::optional<Scenario> parse_scenario(const std::string& text, const std::string& file, std::string& error);

// Reads the file, then parse_scenario. Files over 1 MiB are refused.
std::optional<Scenario> load_scenario(const std::string& path, std::string& error);

// The healthy default: no events, no faults, for `world` devices.
Scenario healthy_scenario();

}  // namespace sim_vendor
