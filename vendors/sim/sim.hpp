// The sim vendor's shared state: the wrapped (inner) plugin, the scenario,
// the clock, and the faults that are armed or have fired.
#pragma once

#include "run_state.hpp"
#include "scenario.hpp"

#include <sigma/hal.h>

#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

namespace sim_vendor {

hal_status_t fail(hal_status_t status, std::string message);
const char* last_error();
uint64_t now_ns();

// The wrapped vendor, loaded by short name from SIGMA_HAL_PLUGIN_PATH or the
// folder this plugin lives in.
struct Inner {
  void* handle = nullptr;
  const hal_api_t* api = nullptr;
  std::string path;
};
// Loads and initialises `name` with `options`; on failure returns a status
// and sets the message.
hal_status_t load_inner(const std::string& name, const std::string& options, Inner& out);
void unload_inner(Inner& inner);

// A fault armed at run time or from the scenario, as the runtime sees it.
struct ActiveFault {
  FaultKind kind;
  double from_s = -1;      // scenario time it starts (or -1: by op)
  int64_t at_op = -1;      // op index it starts at (or -1: by time)
  double until_s = 1e300;  // slow/flapping end
  double factor = 1;
  double gbps = kHealthyLinkGbps;             // slow/flapping/bandwidth: the link's healthy rate
  double latency_us = kHealthyLinkLatencyUs;  // slow/flapping: its healthy per-operation latency
  double period_s = 0;
  uint64_t remaining = 1;      // silent_corruption / nan_burst results left to corrupt
  int op = -1;                 // ... only of this hal_coll_op_t (-1: any)
  bool fired = false;          // one-shot faults
  bool from_scenario = false;  // re-armed when the rank becomes known
  size_t index = 0;            // scenario faults: the fault's position in the file
};

// A telemetry value forced through the fault-injection extension.
struct Excursion {
  hal_field_id_t field;
  double value;
  double until_s;
};

class State {
 public:
  // Everything below is guarded by mu.
  std::mutex mu;
  int refs = 0;
  Scenario scenario;
  Inner inner;
  uint32_t rank = 0;
  bool rank_fixed = false;  // given by option or environment
  uint64_t t0_ns = 0;
  RunState run;             // the job's shared clock and struck crashes
  uint64_t ops_posted = 0;  // collectives posted by this process
  std::vector<ActiveFault> faults;
  std::vector<Excursion> excursions;
  bool device_lost = false;
  uint64_t allocated_bytes = 0;
  uint64_t read_seq = 0;  // telemetry reads, for seeded noise

  // Scenario seconds since init.
  double now_s() const { return static_cast<double>(now_ns() - t0_ns) * 1e-9 * scenario.time_scale; }
  // Arms the scenario's faults for this rank (called when the rank is known).
  void arm_scenario_faults();
  // Fires time-based one-shot faults that are due (device_lost, crash).
  void fire_due_locked();
};

State& state();

// Fires due faults; when the device is (newly) lost, fails what is in flight
// on every communicator. Returns whether the device is lost.
bool poll_device_lost();

// HAL_ERR_DEVICE_LOST with a message when the device was lost, else HAL_OK.
// Fires due faults first. Thread-safety: any thread.
hal_status_t check_alive(uint32_t device);

// Telemetry (telemetry.cpp).
const std::vector<hal_field_info_t>& sim_fields();
void synth_read(const hal_field_id_t* ids, uint32_t n, hal_telemetry_sample_t* out);

// A word for a status in messages ("device lost").
const char* hal_status_name_of(hal_status_t st);

// Communicators (comm.cpp).
extern const hal_coll_api_t k_sim_coll;
void abort_all_comms_device_lost();  // the device died: fail what is in flight
void destroy_all_comms();            // last finalize

}  // namespace sim_vendor
