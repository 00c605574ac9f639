// Contained recovery in the simulator: the runtime's own decisions
// (runtime::agent::contained::Machine, the class sigmarun's coordinator
// drives) fed the events a simulated job meets, at their granularity: a
// fault, a replacement up, a step boundary the machine waits for, a
// transfer done. Never per rank per step. What each of the machine's
// actions costs is the policy's stated cost model (sim.hpp, docs/sim.md);
// this class turns actions into effects on the job (a stall of the live
// set, the step in flight run again, timers, an exact round) and leaves
// the clock, the ledger and the scheduler to the engine.
//
// Pure: events and a clock in, effects out. Thread-safety: one thread.
#pragma once

#include "runtime/agent/contained.hpp"

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace sigma::sim::detail {

struct ContainedCosts {
  double comm_fixed_s = 1;
  double comm_per_member_s = 0;
  double handoff_s = 0;
  double spare_ready_s = 0;
  double comm_s(uint32_t members) const { return comm_fixed_s + comm_per_member_s * members; }
};

// Call the engine back at `at_s` with `kind` and `id` (a rank or a
// replica); `tag` tells a stale timer from a live one.
struct Timer {
  enum class Kind : uint8_t { spare_ready, transferred };
  double at_s = 0;
  Kind kind = Kind::spare_ready;
  uint32_t id = 0;
  uint64_t tag = 0;
};

struct Effects {
  double detect_s = 0;                // the live set stalls until the fault is seen ...
  double reform_s = 0;                // ... and while it re-forms its data-parallel groups
  bool redo_step = false;             // the step in flight runs again
  bool exact = false;                 // contained cannot go on: the exact round runs
  std::string exact_cause;            // ... why
  std::vector<uint32_t> exact_ranks;  // ranks whose state the exact round must restore
  std::vector<Timer> timers;
  uint64_t contained = 0, rejoins = 0;
  void add(const Effects& e);
};

class ContainedJob {
 public:
  // `world` ranks in replicas of `replica_size` (it divides the world).
  ContainedJob(uint32_t world, uint32_t replica_size, const ContainedCosts& costs);

  // Ranks failed at t, the live set at `step`. device_gone: the scheduler
  // replaces them (replaced() follows); else the process restarts where it
  // was, up after spare_ready_s. detect_s: how long the fault takes to see.
  Effects fault(const std::vector<uint32_t>& ranks, bool hung, bool device_gone, const std::string& cause,
                double detect_s, uint64_t step, double t);
  // The scheduler gave `rank` a device (a spare, or a repaired one).
  Effects replaced(uint32_t rank, double t);
  Effects timer(const Timer& timer, uint64_t step, double t);
  // The live set finished `step` (the engine calls at next_step()).
  Effects at_step(uint64_t step, double t);
  // The step at whose end the machine must hear of the live set, if any.
  std::optional<uint64_t> next_step() const;
  // The exact round is over: every replica steps again.
  void exact_done(double t);

  bool exact() const { return machine_.exact(); }
  bool contains(uint32_t rank) const { return machine_.contains(rank); }
  // Its replica is out (it waits for a device or a hand-off).
  bool out(uint32_t rank) const {
    return !machine_.exact() && machine_.stage(rank / size_) != runtime::agent::contained::Stage::healthy;
  }
  // The share of the global batch's pace the live replicas keep.
  double pace() const;
  uint64_t calls() const { return calls_; }
  uint32_t replica_size() const { return size_; }
  uint32_t replicas() const { return machine_.replicas(); }

 private:
  // A hand-off the machine announced: its boundary, the transfer, the rejoin.
  struct Handing {
    uint64_t boundary = 0;
    uint64_t tag = 0;
    bool transferring = false, transferred = false;
    uint64_t replayed_to = 0;  // the live set's step it last replayed to
    std::optional<uint64_t> rejoin_epoch, rejoin_boundary;
  };
  Effects apply(const runtime::agent::contained::Actions& actions, double t);
  void replay(uint32_t replica, uint64_t step, double t, Effects& out);

  runtime::agent::contained::Machine machine_;
  uint32_t size_;
  ContainedCosts costs_;
  std::map<uint32_t, Handing> handing_;          // by replica
  std::map<uint32_t, std::set<uint32_t>> lost_;  // by replica out: ranks whose process went
  uint64_t tags_ = 0;
  uint64_t calls_ = 0;
};

}  // namespace sigma::sim::detail
