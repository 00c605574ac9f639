// sigma/scheduler.hpp -- failure-aware scheduling of devices to ranks: the
// device lifecycle, a spare pool sized from a failure model, proactive
// migration on early warnings, replacement on hard faults, and a degraded
// mode when spares run out.
//
// The Scheduler is pure decision logic: events and a clock (seconds) in,
// Actions out. It performs nothing itself; the agent (sigmarun) carries the
// actions out and the cluster simulator counts them, with the same code.
//
// Lifecycle of a device:
//   new -> validating -> available -> in_use -> suspect -> cordoned
//   cordoned -> repaired -> validating          (after on_repaired)
//   validating -> cordoned                      (self-test or probe failed)
//   available (a spare) -> cordoned             (a spare that warns or fails)
//   suspect -> in_use                           (warnings cleared before the move)
//
// Thread-safety: one thread at a time (the agent's control loop). Nothing
// blocks.
#pragma once

#include <sigma/export.hpp>

#include <sigma/error.hpp>

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace sigma::scheduler {

enum class DeviceState : int { fresh, validating, available, in_use, suspect, cordoned, repaired };

// "new", "validating", "available", "in_use", "suspect", "cordoned", "repaired".
SIGMA_EXPORT const char* state_name(DeviceState s) noexcept;

// What the spare pool is sized from. Rates are per device-hour of use.
struct FailureModel {
  double failures_per_device_hour = 0;
  double repair_hours = 24;
  double job_hours = 24;
  double target_risk = 0.01;  // acceptable chance of running out during the job
};

struct SparePlan {
  uint32_t spares = 0;
  double risk = 0;               // the chance of running out with `spares`
  double expected_failures = 0;  // over the job
  std::string rule;              // the rule and its figures, one line
};

// The smallest number of spares whose chance of running out during the job
// is at most target_risk. Devices under repair at once are Poisson with mean
// N * rate * min(repair, job) (an M/G/inf queue); the job spans
// max(1, job / repair) independent repair windows. Throws
// Error(invalid_argument) for a negative rate, non-positive hours or a risk
// outside (0, 1).
SIGMA_EXPORT SparePlan size_spares(uint32_t devices_in_use, const FailureModel& model);

struct Config {
  uint32_t world_size = 1;
  bool proactive_migration = true;
  bool allow_shrink = false;    // degraded mode may shrink the data-parallel world
  uint32_t min_world_size = 1;  // ... but never below this
  // Locality: devices fall into groups of this many consecutive ids (a node,
  // a rack); 0 is one group. start() spreads the ranks over the groups in
  // proportion to their devices, so each keeps spares; a rank is replaced
  // from its own group's spares first and migrates only within its group.
  uint32_t group_size = 0;
  // Or explicitly: groups[device] is the device's group (ids past the end
  // follow group_size). sigmarun groups its agents' devices this way.
  std::vector<uint32_t> groups{};
  // This scheduler is one group's controller inside a Hierarchy: at a hard
  // fault with no spare it emits `escalate` and holds the rank missing;
  // shrinking, pausing and resuming are the root's, and validation_done
  // does not fill a missing rank by itself (fill_missing does).
  bool escalate = false;
};

inline constexpr uint32_t kNone = UINT32_MAX;

// The group of `device` under `config` (Config::groups, else group_size;
// 0 without either).
SIGMA_EXPORT uint32_t group_of(const Config& config, uint32_t device) noexcept;

struct Action {
  enum class Kind {
    validate,             // run self_test + a collective probe on `device`
    admit,                // `device` passed validation and joined the pool
    cordon,               // `device` taken out of service (reason says why)
    assign,               // `rank` runs on `device`
    migrate,              // at this step boundary move `rank` from `device` to `to_device`,
                          // state handed over in memory
    abort_communicators,  // abort the survivors' collectives (a hard fault on `device`)
    replace,              // `rank` restarts on `to_device` (spare) after `device` failed
    restore,              // every rank restores from `tier` ("memory" or "disk")
    shrink,               // degraded: continue with `world_size` ranks, `rank` dropped
    pause,                // degraded: no spare and no shrinking; wait for a repaired device
    resume,               // leaving pause
    escalate,             // a group controller has no spare for `rank` (lost `device`): the root decides
  } kind;
  uint32_t device = kNone;
  uint32_t rank = kNone;
  uint32_t to_device = kNone;
  uint32_t world_size = 0;
  std::string tier;
  std::string reason;
  double at_s = 0;
};

// The ranks each group runs when `world` ranks spread over groups with
// these numbers of available devices: in proportion, the remainder to the
// groups with the most left over (lowest first), never more than a group
// has. Throws Error(unavailable) when the groups hold fewer than `world`.
SIGMA_EXPORT std::vector<uint32_t> split_world(uint32_t world, const std::vector<uint32_t>& available);

// "validate", "admit", ... as written in journals.
SIGMA_EXPORT const char* action_name(Action::Kind k) noexcept;

class SIGMA_EXPORT Scheduler {
 public:
  // Throws Error(invalid_argument) for world_size 0 or min_world_size above it.
  explicit Scheduler(Config config);

  // A new device: new -> validating; returns the validate action.
  std::vector<Action> add_device(uint32_t device, double t_s);
  // The outcome of validation: available (admit) or cordoned.
  std::vector<Action> validation_done(uint32_t device, bool passed, const std::string& detail, double t_s);
  // Assigns ranks 0..world-1 to available devices, lowest id first; the rest
  // stay spares. Throws Error(unavailable) when too few devices are available.
  std::vector<Action> start(double t_s);
  // The same with `world` ranks instead of Config::world_size (a group
  // controller learns its share at start; 0 is allowed when escalating).
  std::vector<Action> start(double t_s, uint32_t world);

  // An early warning (the health monitor's suspect/failing). In use: the
  // device turns suspect and, with a spare and proactive migration on, a
  // migration waits for the next step boundary. A spare: cordoned.
  std::vector<Action> on_warning(uint32_t device, const std::string& reason, double t_s);
  // The warnings on a suspect device cleared before its migration ran.
  std::vector<Action> on_calm(uint32_t device, double t_s);
  // A step boundary: pending migrations run now (the suspect is cordoned).
  std::vector<Action> at_step_boundary(uint64_t step, double t_s);
  // A hard fault (crash, hang, lost device). In use: abort the survivors'
  // collectives, replace the rank with a spare and restore from the memory
  // tier when it holds the rank's state (`memory_tier_ok`), else disk; with
  // no spare, shrink or pause. A spare: cordoned.
  std::vector<Action> on_fault(uint32_t device, const std::string& reason, bool memory_tier_ok, double t_s);
  // A cordoned device came back from repair: repaired -> validating. When
  // the job is paused, a device that then passes validation resumes it.
  std::vector<Action> on_repaired(uint32_t device, double t_s);

  // What a Hierarchy's root does with its group controllers. Each throws
  // Error(invalid_argument) when the device or rank is not as stated.
  // A device handed over by another group joins in `state` (available or
  // cordoned); release() forgets one (an unreserved spare or a cordoned
  // device) so that another group can adopt it.
  void adopt(uint32_t device, DeviceState state);
  void release(uint32_t device);
  // The first missing rank (escalated or paused) runs on the available
  // `device` from now on: replace (of `failed`, kNone after a pause) and
  // restore from `tier`.
  std::vector<Action> fill_missing(uint32_t device, uint32_t failed, const std::string& tier,
                                   const std::string& reason, double t_s);
  // The first missing rank is dropped: ranks above it move down by one.
  void drop_missing();

  DeviceState state(uint32_t device) const;  // throws invalid_argument if unknown
  bool knows(uint32_t device) const { return devices_.count(device) != 0; }
  std::optional<uint32_t> device_of(uint32_t rank) const;
  std::optional<uint32_t> rank_of(uint32_t device) const;  // the rank a device runs, if any
  std::vector<uint32_t> spares() const;                    // available devices, ascending
  uint32_t world_size() const noexcept { return world_size_; }
  // Ranks without a device: the job is paused (a group controller: waiting
  // for its root).
  bool paused() const noexcept { return !missing_ranks_.empty(); }
  std::optional<uint32_t> pending_migration(uint32_t device) const;  // the target spare
  const std::vector<Action>& history() const noexcept { return history_; }

 private:
  std::vector<Action> emit(std::vector<Action> actions);
  DeviceState& at(uint32_t device);
  std::optional<uint32_t> take_spare(uint32_t exclude, bool other_groups);
  uint32_t group_of_rank(uint32_t rank) const;
  void renumber_without(uint32_t rank);
  void set_state(uint32_t device, DeviceState s);
  void bind(uint32_t rank, uint32_t device);
  void unbind(uint32_t rank);
  void reserve(uint32_t device, uint32_t spare);
  void unreserve(std::map<uint32_t, uint32_t>::iterator it);
  void drop_reservation_of(uint32_t spare);

  Config config_;
  uint32_t world_size_;
  bool started_ = false;
  std::map<uint32_t, DeviceState> devices_;
  std::map<uint32_t, uint32_t> rank_device_;  // rank -> device
  std::map<uint32_t, uint32_t> device_rank_;  // its inverse
  std::set<uint32_t> available_;              // devices in state available, ascending
  std::set<uint32_t> suspects_;               // devices in state suspect
  std::set<uint32_t> reserved_;               // spares a migration counts on (migrations_'s values)
  std::map<uint32_t, uint32_t> migrations_;   // suspect device -> reserved spare
  std::vector<uint32_t> missing_ranks_;       // paused: ranks without a device
  std::vector<uint32_t> group_ranks_;         // ranks per group, in rank order (start)
  std::vector<Action> history_;
};

}  // namespace sigma::scheduler
