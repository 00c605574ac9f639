// Contained recovery's decisions, for the agent's Coordinator
// (`--recovery contained`). The world is R data-parallel replicas of one
// model-parallel group (EP x PP); a fault stops only the replica it hit.
// The other replicas keep stepping over data-parallel groups re-formed on
// the live replicas and take over the stopped replica's micro-batches
// (share_of), so the global batch and the data order are kept: the only
// difference from a fault-free run is the order of the sums. The stopped
// replica's lost ranks are replaced by spares; at a step boundary every
// rank of it takes live state (parameters, optimizer, guardrails policy,
// data position) from its counterpart in a healthy replica, the donor, and
// the groups re-form over every replica again. With one replica, or when a
// fault leaves no healthy replica to keep stepping or to give state, the
// exact round (recovery_round.hpp) runs instead.
//
// A replica's stages:
//   healthy    stepping in the live set
//   stopping   told to stop; each rank must leave its collectives (report,
//              or its process ends) within abort_grace_s, else it is killed
//              and replaced like a crashed one
//   waiting    stopped; its lost ranks wait for spares (none free: the job
//              runs with one replica fewer until one is)
//   handing    every rank has a process; at the end of step `boundary` each
//              donor rank starts streaming its state to its counterpart,
//              then the reduced result of every later data-parallel
//              exchange: the replica takes the state and replays those
//              steps (computing nothing) while the live set steps on. Once
//              its slowest rank is within `catch_up_slack` steps of the
//              live set, a second Reform (`rejoin`) names the step at whose
//              end the stream stops and the live set re-forms with the
//              replica in
// One hand-off runs at a time (a second ready replica waits for it). A
// fault in a handing replica (its spare dies) sends it back to waiting; a
// fault in its donor voids the hand-off, and another healthy replica gives
// the state if there is one.
//
// Epochs number the live set: every change (a replica out, a replica back)
// is a new epoch, announced by a Reform the healthy replicas carry out at
// once (the step in flight runs again over the new set) or, for a rejoin,
// at its boundary. A hand-off's start is an epoch too (every rank says it
// carried it out), the live set unchanged.
//
// Pure: events and a clock in, actions out. Thread-safety: one thread at a time.
#pragma once

// GCC 12 reports the moves of a JSON value inside the Action variant (a
// Note) as "may be used uninitialized"; every alternative here has its
// members initialised.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

#include <nlohmann/json.hpp>

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <variant>
#include <vector>

namespace sigma::runtime::agent::contained {

// The micro-batches of a global step that live replica `replica` computes,
// in order: micro-batch m goes to the (m mod |live|)-th live replica, so
// every micro-batch is computed once whichever replicas are live. `live`:
// the live replicas, ascending; `replica` must be one of them. Pure.
std::vector<uint32_t> share_of(uint32_t microbatches, const std::vector<uint32_t>& live, uint32_t replica);

// ---- actions ----------------------------------------------------------------

struct StopRanks {  // abort these ranks' collectives; they wait for a hand-off
  uint32_t replica = 0;
  std::vector<uint32_t> ranks;
  std::string cause;
};
struct KillRank {  // it did not leave its collective, or hangs: end its process
  uint32_t rank = 0;
};
struct ReplaceRank {  // a spare takes the rank (device_gone: never on that device again)
  uint32_t rank = 0;
  bool device_gone = false;
};
// The healthy replicas re-form their data-parallel groups over `live` as
// epoch `epoch` at once (rejoining empty: the step in flight runs again
// over the new set). With a boundary: at the end of step `boundary` the
// `donor` replica starts handing its state to the `rejoining` ones (`live`
// is the set they will rejoin), or, with `rejoin`, the hand-off's stream
// stops and the live set re-forms as `live`.
struct Reform {
  uint64_t epoch = 0;
  std::vector<uint32_t> live;
  std::vector<uint32_t> rejoining;
  std::optional<uint32_t> donor;
  std::optional<uint64_t> boundary;
  bool rejoin = false;
};
struct ExactRound {  // contained cannot go on: the world's exact round runs
  std::string cause;
};
struct Note {  // one journal line
  nlohmann::json entry;
};
using Action = std::variant<StopRanks, KillRank, ReplaceRank, Reform, ExactRound, Note>;
using Actions = std::vector<Action>;

enum class Stage : uint8_t { healthy, stopping, waiting, handing };
const char* stage_name(Stage s);

struct Options {
  double abort_grace_s = 10;  // a stopping rank must leave its collectives within this
  // The hand-off's boundary: this many steps past the last one the live
  // set finished when the replica is ready (the healthy ranks must hear of
  // it before they pass it).
  uint64_t boundary_lead = 2;
  // A replica catching up rejoins once its slowest rank has replayed to
  // within this many steps of the live set.
  uint64_t catch_up_slack = 2;
  // ... or once its ranks have replayed this long without catching up
  // (the replay no faster than the live set's steps): the live set then
  // waits at the rejoin's boundary for the replica to replay to it.
  double catch_up_limit_s = 5;
};

class Machine {
 public:
  // replica_of[rank]: the replica the rank belongs to (0 .. R-1, each
  // replica the same size). Throws std::invalid_argument otherwise.
  Machine(std::vector<uint32_t> replica_of, Options options);

  enum class FaultKind : uint8_t { process_ended, hung, device_lost };

  // ---- events ----
  // A rank failed at t: its replica stops (or, with no healthy replica
  // left, the exact round runs). A hung rank is killed first.
  Actions fault(uint32_t rank, FaultKind kind, const std::string& cause, double t);
  // A rank of a stopping replica left its collectives (reported, or its
  // process ended after the fault).
  Actions rank_out(uint32_t rank, double t);
  // A rank reported a failure while its replica was healthy (a collective
  // broke, perhaps for a peer whose end is not known yet) or handing: its
  // replica stops (or its hand-off is void) and it has left its
  // collectives; it is not lost, and takes state in the next hand-off.
  Actions reported(uint32_t rank, const std::string& cause, double t);
  // A spare took `rank` and is connected, waiting for the hand-off.
  Actions spare_ready(uint32_t rank, double t);
  // A rank of a handing replica finished (replayed) `step`.
  Actions replayed(uint32_t rank, uint64_t step, double t);
  // The live set finished `step` (its slowest rank).
  Actions step_done(uint64_t step, double t);
  // Every rank of the live set and of the rejoining replicas is in epoch
  // `epoch` at t: the hand-off is over (or a removal took effect).
  Actions reformed(uint64_t epoch, double t);
  // The coordinator runs the exact round for a cause of its own (a stalled
  // step, a failed assignment): every open incident ends in it, every
  // replica is in it, and exact_done() ends it as after a fall-back.
  Actions exact_round(const std::string& cause, double t);
  // The exact round that contained fell back to is over: every replica is
  // healthy again, in a new epoch.
  Actions exact_done(double t);
  Actions tick(double t);

  // ---- state ----
  uint32_t replicas() const { return replicas_; }
  Stage stage(uint32_t replica) const { return groups_.at(replica).stage; }
  std::vector<uint32_t> live() const;  // the healthy replicas, ascending
  uint64_t epoch() const { return epoch_; }
  // A fault of `rank` now stops only its replica: the replica is healthy,
  // another one steps on, no exact round runs. A proactive migration waits
  // for this (coordinator_contained.cpp).
  bool contains(uint32_t rank) const;
  bool exact() const { return exact_; }  // an exact round runs
  uint64_t degraded_steps() const { return degraded_steps_; }
  // Every replica incident's record, oldest first (the open ones not included).
  const std::vector<nlohmann::json>& incidents() const { return incidents_; }

 private:
  struct Group {
    Group();  // not noexcept: the incident record's JSON may allocate
    Stage stage = Stage::healthy;
    std::vector<uint32_t> ranks;
    std::set<uint32_t> out;         // stopping: ranks that left their collectives
    std::set<uint32_t> lost;        // ranks being replaced, not ready yet
    double stop_s = 0;              // when it was told to stop
    std::optional<uint32_t> donor;  // handing: whose state it takes
    uint64_t boundary = 0;
    uint64_t handoff_epoch = 0;             // handing: the stream's start
    uint64_t rejoin_epoch = 0;              // handing: the rejoin, once announced (0: not yet)
    std::map<uint32_t, uint64_t> replayed;  // handing: steps each rank has replayed
    double replaying_s = -1;                // handing: when every rank had replayed a step
    nlohmann::json incident;                // the open incident's record
    uint64_t degraded_from = 0;             // steps done when it went out
  };

  void stop(uint32_t replica, const std::string& cause, double t);
  void lose(uint32_t rank, FaultKind kind);
  void fault_while_handing(uint32_t replica, uint32_t rank, FaultKind kind);
  void void_handoffs_from(uint32_t donor);
  void restart(uint32_t replica, const std::string& why);
  void reform_now();
  void maybe_hand_off();
  void maybe_waiting(uint32_t replica);
  void fall_back(const std::string& cause);
  std::optional<uint32_t> donor_for(uint32_t replica) const;
  bool handing_any() const;
  void note(nlohmann::json entry) { out_.push_back(Note{std::move(entry)}); }
  Actions take();

  std::vector<uint32_t> replica_of_;
  Options o_;
  uint32_t replicas_ = 0;
  std::vector<Group> groups_;
  uint64_t epoch_ = 0;
  uint64_t steps_done_ = 0;  // the live set's steps
  uint64_t degraded_steps_ = 0;
  bool exact_ = false;
  double t_ = 0;
  Actions out_;
  std::vector<nlohmann::json> incidents_;
};

}  // namespace sigma::runtime::agent::contained
