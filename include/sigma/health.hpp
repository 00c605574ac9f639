// sigma/health.hpp -- the health monitor: telemetry and step figures in,
// per-device health out, every verdict with the signal, figures and rule.
//
// The Monitor is pure logic driven by observations and a clock in seconds
// (any origin, never decreasing per device), so the agent, the tests and the
// cluster simulator run the same code. A Sampler reads a HAL plugin's
// telemetry on its own thread and feeds a Monitor.
//
// Detectors:
//   threshold    temperature at or above warn_c (suspect) / critical_c (failing),
//                thermal throttling, a fatal code, uncorrectable ECC (failing)
//   trend        EWMA of temperature and its least-squares slope over
//                trend_window_s: "crosses critical_c in ~N s" within
//                trend_horizon_s (suspect)
//   ecc_rate     correctable ECC errors per minute over ecc_window_s (suspect)
//   link_rate    link errors per minute over link_window_s (suspect)
//   straggler    the device's median step time over its peers' median
//                (suspect above straggler_ratio and straggler_min_excess_s
//                once straggler_min_steps are seen). Feed it the rank's own
//                compute time where the trainer has it: in synchronous data
//                parallelism every rank's wall step time includes waiting
//                for the slowest.
//   heartbeat    no heartbeat for heartbeat_timeout_s after the first (failed)
//   error        a collective timeout or async error (suspect); device lost or
//                a process that exited (failed)
// A warning clears when its condition has been false for clear_after_s; a
// failed device stays failed until reset() (a repaired device starts over).
//
// Thread-safety: every member of Monitor may be called from any thread,
// concurrently (one mutex inside). Nothing blocks beyond that mutex.
#pragma once

#include <sigma/export.hpp>

#include <sigma/hal.h>
#include <sigma/error.hpp>
#include <sigma/hal.hpp>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace sigma::health {

enum class State : int { healthy = 0, suspect = 1, failing = 2, failed = 3 };

// "healthy", "suspect", "failing", "failed".
SIGMA_EXPORT const char* state_name(State s) noexcept;

struct Config {
  size_t history_samples = 600;  // telemetry samples kept per device
  double warn_c = 90.0;
  double critical_c = 95.0;
  double ewma_alpha = 0.3;
  double trend_window_s = 20.0;    // slope fitted over this much EWMA history
  double trend_horizon_s = 300.0;  // warn when the crossing is predicted sooner
  double trend_min_slope_c_per_s = 0.02;
  double ecc_window_s = 30.0;
  double ecc_per_min_suspect = 30.0;
  double link_window_s = 30.0;
  double link_errors_per_min_suspect = 60.0;
  double straggler_ratio = 1.5;
  double straggler_min_excess_s = 0.05;  // and at least this much slower
  size_t straggler_window_steps = 50;
  size_t straggler_min_steps = 20;
  double heartbeat_timeout_s = 5.0;
  double clear_after_s = 30.0;
};

// Refuses impossible values (negative windows, critical below warn, alpha
// outside (0, 1], ...) with the field's name. Throws Error(invalid_argument).
SIGMA_EXPORT void validate(const Config& config);

// `config` for devices whose clock runs `device_seconds_per_second` times
// faster than the wall clock (a simulated device that compresses its
// scenario's time): the trend and rate windows, the trend horizon and the
// clearing delay shrink by that factor, the slope and rate thresholds grow
// by it; windows keep a floor of a few heartbeats (0.5 s for the trend, 1 s
// for error rates). Heartbeat and straggler figures stay in wall time. 1
// returns `config` unchanged. Throws Error(invalid_argument) for a factor
// that is not a positive finite number. Pure; any thread.
SIGMA_EXPORT Config time_scaled(const Config& config, double device_seconds_per_second);

// One verdict of one detector about one device.
struct Warning {
  uint32_t device = 0;
  std::string signal;  // "temperature", "ecc_correctable", "step_time", ...
  std::string rule;    // "threshold", "trend", "ecc_rate", "straggler", ...
  State severity = State::suspect;
  double value = 0;      // the figure that fired (°C, errors/min, ratio, s)
  double threshold = 0;  // what it was compared with
  double eta_s = -1;     // trend: seconds until the threshold; -1 otherwise
  double since_s = 0;    // when it first fired
  std::string message;   // one human line with the figures
};

struct DeviceHealth {
  uint32_t device = 0;
  State state = State::healthy;
  double score = 1.0;             // 1 healthy .. 0 failed
  std::vector<Warning> warnings;  // active, most severe first
};

// A change the owner should act on: a warning raised or cleared, or a state
// change (then `warning` is the rule that drove it, when one did).
struct Event {
  enum class Kind { warning_raised, warning_cleared, state_changed } kind;
  uint32_t device = 0;
  double at_s = 0;
  State from = State::healthy, to = State::healthy;
  Warning warning;
};

class SIGMA_EXPORT Monitor {
 public:
  explicit Monitor(Config config = {});
  ~Monitor();
  Monitor(const Monitor&) = delete;
  Monitor& operator=(const Monitor&) = delete;

  // Registers a device (idempotent). Observations name devices by this id.
  void add_device(uint32_t device);

  // Telemetry samples read at t_s (HAL samples; fields with a non-OK status
  // are ignored except DEVICE_LOST, which fails the device).
  void observe_telemetry(uint32_t device, double t_s, const hal_telemetry_sample_t* samples, size_t n);
  // The wall time of one training step on the device.
  void observe_step(uint32_t device, uint64_t step, double step_time_s, double t_s);
  void observe_heartbeat(uint32_t device, double t_s);
  // An error seen on the device: timeout / remote_error / aborted make it
  // suspect; device_lost (and a process exit, reported as device_lost or
  // internal with `what`) fail it.
  void observe_error(uint32_t device, Code code, const std::string& what, double t_s);

  // Runs every detector at t_s and returns what changed since the last call.
  std::vector<Event> evaluate(double t_s);

  DeviceHealth device(uint32_t device) const;
  std::vector<DeviceHealth> devices() const;

  // Forgets a device's history and verdicts (a repaired device, or a new
  // process on it); it is healthy again until observations say otherwise.
  void reset(uint32_t device);

  const Config& config() const noexcept { return config_; }

 private:
  struct Impl;
  Config config_;
  std::unique_ptr<Impl> impl_;
};

// Reads every listed telemetry field of `devices` at `rate_hz` on its own
// thread and hands them to `monitor` (time: seconds of CLOCK_MONOTONIC).
// The plugin and monitor must outlive the sampler. stop() (or the
// destructor) joins the thread. Thread-safety: start/stop from one thread.
class SIGMA_EXPORT Sampler {
 public:
  Sampler(const hal::Plugin& plugin, std::vector<uint32_t> devices, Monitor& monitor, double rate_hz);
  ~Sampler();
  Sampler(const Sampler&) = delete;
  Sampler& operator=(const Sampler&) = delete;
  void start();
  void stop();
  uint64_t rounds() const noexcept { return rounds_.load(); }

 private:
  void loop();
  const hal::Plugin& plugin_;
  std::vector<uint32_t> devices_;
  Monitor& monitor_;
  double rate_hz_;
  std::vector<std::vector<hal_field_id_t>> fields_;
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> rounds_{0};
  std::mutex wake_mu_;
  std::condition_variable wake_;
  std::thread thread_;
};

// Seconds of CLOCK_MONOTONIC, the clock the sampler and the agent use.
SIGMA_EXPORT double monotonic_s() noexcept;

}  // namespace sigma::health
