// The exact recovery rounds of a simulated job, kept by the agent's own
// RecoveryRound (runtime/agent/recovery_round.hpp): a fault that stops the
// job begins a round, or joins the one in progress short of its rejoin, as
// it does in sigmarun; the engine says when the round's stalls end (the
// assignment, the rejoin) and when the job is back at the step it had
// reached. What it keeps: how many rounds, how many faults joined one, and
// each round's time from its fault to back at the reached step.
//
// Pure: the engine's clock in. Thread-safety: one thread at a time.
#pragma once

#include "runtime/agent/recovery_round.hpp"

#include <sigma/sim.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace sigma::sim::detail {

class ExactRounds {
 public:
  // A fault at t, seen detect_s later, with the job's progress at step
  // `at_step`. True: a new round.
  bool fault(const std::string& cause, double t, double detect_s, uint64_t at_step);
  // The round's abort and re-form are over at t: the next generation
  // restores `index` from `tier`.
  void assigned(double t, uint64_t index, runtime::RestoreTier tier);
  // Every rank has joined at t; the job recomputes up to reached().
  void rejoined(double t, double restart_s, double restore_s);
  // The step a rejoined round waits for the job to reach (none: no round
  // recomputes).
  std::optional<uint64_t> recomputing_to() const;
  // The job is back at the reached step at t: the round is over.
  void back(double t);

  uint64_t rounds() const { return round_.incident_count(); }
  uint64_t joined() const { return joined_; }
  // From each round's fault to back at its reached step, over the rounds
  // that got there (one ended by the next fault does not count).
  LatencyFigures recovery() const;

 private:
  runtime::agent::RecoveryRound round_;
  uint64_t generation_ = 1, joined_ = 0;
  std::vector<double> back_s_;
};

}  // namespace sigma::sim::detail
