// A recovery round's own state, for the agent's Coordinator: its cause (a
// second fault joins the round in progress), when the fault came, was seen
// and the survivors were aborted, the assignment and what it restores, the
// assignments that failed (after kMaxFailedAssignments the job pauses),
// the pause the scheduler asked for, and the incident record each round
// leaves for the report. The Coordinator asks the survivors, assigns and
// watches; this decides what the round is and keeps its record.
//
// A round's stages: reporting (survivors aborted, their reports awaited),
// assigned (the next generation told to join), rejoined (every rank joined;
// the job recomputes to the step it had reached), then over.
//
// Pure: events and a clock in. Thread-safety: one thread at a time.
#pragma once

#include "runtime/restore_tier.hpp"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace sigma::runtime::agent {

class RecoveryRound {
 public:
  // Assignments that may fail (no rank could build the communicator or
  // restore) before the job pauses with the reason instead of trying for ever.
  static constexpr uint32_t kMaxFailedAssignments = 3;

  // Not noexcept: the incident record's JSON may allocate.
  RecoveryRound();

  // What a round cost, charged to the ledger when every rank has rejoined.
  struct Charges {
    double detection_s = 0;  // from the fault to its detection
    double restart_s = 0;    // from the detection to the rejoin, less the restore
    double restore_s = 0;
    uint64_t recomputed_steps = 0;
  };

  // A fault `cause` that came at fault_s, seen at t (from_report: first seen
  // as a survivor's report, which a fault may name better). Short of its
  // rejoin, the round in progress goes on with one more casualty and its
  // assignment is void; otherwise a new round starts at step `reached`
  // (a rejoined round still recomputing is closed unfinished). True when
  // the round is new: every survivor must report again.
  bool fault(const std::string& cause, double fault_s, bool from_report, double t, uint64_t reached);
  // A proactive migration at t: every rank stops after step boundary + 1.
  void migration(const std::string& cause, double t, uint64_t reached, const nlohmann::json& warning);
  // The scheduler has no device left at t: the round ends the job when it
  // would assign, unless a device still validating comes first (the
  // Coordinator waits for it) and the scheduler resumes the round.
  void pause(std::string reason, double t);
  // The scheduler found every rank a device (one that passed validation
  // while the round was paused). A round paused for its failed assignments
  // stays paused.
  void resume();
  // An assignment no rank could carry out; the Coordinator starts over with
  // a fault of `why`. The kMaxFailedAssignments-th pauses the round.
  void assignment_failed(const std::string& why);
  void assigned(double t, uint64_t index, RestoreTier tier);
  // Every rank joined `generation` at t; what the round cost.
  Charges rejoined(double t, uint64_t generation, double comm_s, double restore_s);
  // Back at the step it had reached at t: the round is over.
  void recovered(double t);
  // The job ends: a round in progress is recorded as it stands.
  void close();

  bool active() const { return active_; }
  bool waiting_for_reports() const { return active_ && !assigned_; }
  bool assigned() const { return assigned_; }
  bool rejoined() const { return rejoined_; }
  bool paused() const { return paused_; }
  double paused_s() const { return paused_s_; }  // when the scheduler paused it
  const std::string& pause_reason() const { return pause_reason_; }
  const std::string& cause() const { return cause_; }
  uint64_t reached() const { return reached_; }  // the step to get back to
  double fault_s() const { return fault_s_; }
  double assigned_s() const { return assigned_s_; }
  bool abort_overdue(double t, double grace_s) const { return t - abort_s_ > grace_s; }
  bool assignment_overdue(double t, double timeout_s) const { return t - assigned_s_ > timeout_s; }

  // Every round's record, oldest first (the one in progress not included
  // until it is over or closed).
  const std::vector<nlohmann::json>& incidents() const { return incidents_; }
  size_t incident_count() const { return incidents_.size() + (active_ ? 1 : 0); }

 private:
  void begin(const std::string& cause, double fault_s, double t, uint64_t reached);

  bool active_ = false, assigned_ = false, rejoined_ = false, paused_ = false;
  bool gave_up_ = false;  // paused after kMaxFailedAssignments
  double paused_s_ = 0;
  std::string cause_, pause_reason_;
  bool cause_is_report_ = false;  // first seen as a rank's report (a fault may name it better)
  double fault_s_ = 0, detected_s_ = 0, abort_s_ = 0, assigned_s_ = 0;
  uint64_t reached_ = 0, index_ = 0;
  RestoreTier tier_ = RestoreTier::none;
  uint32_t failed_assignments_ = 0;
  nlohmann::json incident_;  // the round's record, for the report
  std::vector<nlohmann::json> incidents_;
};

}  // namespace sigma::runtime::agent
