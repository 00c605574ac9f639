// What the processes of one job share about the simulated devices: the
// scenario's clock (a device's story does not restart with a new worker
// process on it) and which one-shot crashes already struck (a restarted
// worker is not killed again by the same fault). Kept as small files in the
// job folder, keyed by the job's rendezvous store (SIGMA_STORE, unique to a
// sigmarun run), so a later run in the same folder starts afresh. Without a
// job folder or a store (a plain test), each process has its own clock and
// every crash fires.
#pragma once

#include <cstdint>
#include <string>

namespace sim_vendor {

class RunState {
 public:
  // job_dir may be empty.
  void open(const std::string& job_dir);
  // The clock origin (CLOCK_MONOTONIC ns): the first process's `now`.
  uint64_t origin(uint64_t now) const;
  // True the first time a process of the run asks for (rank, fault index).
  bool first_strike(uint32_t rank, size_t fault) const;

 private:
  std::string prefix_;  // "<job_dir>/sim-<key>-", or empty
};

}  // namespace sim_vendor
