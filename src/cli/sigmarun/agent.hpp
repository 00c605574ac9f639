// sigmarun's agent: launches one worker per device plus warm spares, hosts
// the health monitor and the scheduler, carries out their decisions, and
// keeps the incident journal, the goodput ledger and the final report.
#pragma once

#include <sigma/health.hpp>
#include <sigma/scheduler.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace sigma::sigmarun {

struct Options {
  uint32_t nproc = 1;      // ranks per node
  uint32_t spares = 0;     // spares per node
  uint32_t nnodes = 1;     // agents (hosts) in the job
  uint32_t node_rank = 0;  // 0: the root agent, which decides; others follow
  std::string host;        // where the root is reached (nnodes > 1); default: this host's name
  std::string job_id;      // names the job in the store; default: the job folder's name
  std::string vendor = "cpu";
  // Passed to every worker's plugin as SIGMA_HAL_OPTIONS; "{device}" becomes
  // the worker's device number.
  std::string vendor_options;
  // Device-time seconds per wall second, for the health monitor's windows
  // (a simulated device that compresses time); see health::time_scaled.
  double health_time_scale = 1;
  std::string job_dir;
  std::string store;         // empty: file store in the job dir
  double heartbeat_s = 0.1;  // worker heartbeat period
  double heartbeat_timeout_s = 3;
  double abort_grace_s = 5;
  double step_timeout_s = 60;      // no step completed for this long: a stuck collective
  double validate_timeout_s = 30;  // start without devices still validating after this      // survivors must
                                   // report within this after an abort
  uint64_t snapshot_every = 1;
  uint64_t checkpoint_every = 0;
  int metrics_port = -1;  // -1 off, 0 any free port
  bool progress = true;
  bool proactive_migration = true;
  bool allow_shrink = false;  // no spare left: go on with fewer ranks (a replicated, data-parallel state)
  uint32_t min_world = 1;     // ... but never fewer than this many ranks in all
  double failure_rate_per_device_hour = 0;  // for the spare advice in the report
  double repair_hours = 24;
  double job_hours = 24;
  std::vector<std::string> worker;  // program and arguments
};

// Runs the job to its end. Exit status: 0 done; 3 paused (degraded, state
// persisted); 4 unrecoverable (said why); 2 bad usage / could not start;
// 128 + N stopped by signal N (SIGTERM, SIGINT).
int run(const Options& options);

}  // namespace sigma::sigmarun
