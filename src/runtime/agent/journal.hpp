// The incident journal (JSON lines, flushed per line so a crash of the agent
// loses nothing written) and the goodput ledger.
#pragma once

#include <sigma/health.hpp>
#include <sigma/scheduler.hpp>

#include <nlohmann/json.hpp>

#include <cstdio>
#include <string>

namespace sigma::sigmarun {

class Journal {
 public:
  Journal(const std::string& path, double t0);
  ~Journal();
  Journal(const Journal&) = delete;
  Journal& operator=(const Journal&) = delete;
  // Adds "t" (seconds since the agent started) and writes one line.
  void write(nlohmann::json record);
  void action(const scheduler::Action& a);
  void health(const health::Event& e);

 private:
  std::FILE* f_;
  double t0_;
};

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

// Writes `j` to `path` through a temporary file and a rename.
void write_json_file(const std::string& path, const nlohmann::json& j);

}  // namespace sigma::sigmarun
