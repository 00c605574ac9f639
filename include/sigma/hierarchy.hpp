// sigma/hierarchy.hpp -- the scheduler as a tree: group controllers, each a
// Scheduler over a group of consecutive device ids, under a root that only
// hears what a group cannot settle.
//
// A group replaces a failed device from its own spares, migrates a warning
// device to one of them, cordons and re-validates its devices, and answers
// the questions about them. It escalates to the root only a hard fault with
// no spare left in the group. The root then lends the lowest free spare of
// another group (the device stays lent until it is cordoned and comes back
// from repair, when its own group takes it back), or, with none anywhere,
// shrinks or pauses the job; a device validated while the job is paused is
// lent to the group whose rank waits longest.
//
// The decisions are the flat Scheduler's with Config::group_size set to the
// same group size, action for action (a unit test drives both with the same
// random events); only `escalate` actions, the groups' messages to the
// root, are added (none with a single group, which is its own root).
// Global ranks are contiguous per group, in group order.
//
// Thread-safety: one thread at a time, like Scheduler. Nothing blocks.
#pragma once

#include <sigma/scheduler.hpp>

#include <memory>
#include <unordered_map>

namespace sigma::scheduler {

class SIGMA_EXPORT Hierarchy {
 public:
  // `config.group_size` (devices per group) or `config.groups` must be set; allow_shrink and
  // min_world_size are the root's. Throws Error(invalid_argument).
  explicit Hierarchy(Config config);
  ~Hierarchy();
  Hierarchy(const Hierarchy&) = delete;
  Hierarchy& operator=(const Hierarchy&) = delete;

  // The Scheduler's entries, with the same meaning and results.
  std::vector<Action> add_device(uint32_t device, double t_s);
  std::vector<Action> validation_done(uint32_t device, bool passed, const std::string& detail, double t_s);
  std::vector<Action> start(double t_s);
  std::vector<Action> on_warning(uint32_t device, const std::string& reason, double t_s);
  std::vector<Action> on_calm(uint32_t device, double t_s);
  std::vector<Action> at_step_boundary(uint64_t step, double t_s);
  std::vector<Action> on_fault(uint32_t device, const std::string& reason, bool memory_tier_ok, double t_s);
  std::vector<Action> on_repaired(uint32_t device, double t_s);

  DeviceState state(uint32_t device) const;
  std::optional<uint32_t> device_of(uint32_t rank) const;
  std::optional<uint32_t> rank_of(uint32_t device) const;
  std::vector<uint32_t> spares() const;
  uint32_t world_size() const noexcept { return world_size_; }
  bool paused() const noexcept { return !waiting_.empty(); }
  std::optional<uint32_t> pending_migration(uint32_t device) const;
  const std::vector<Action>& history() const noexcept { return history_; }

  // The group a device belongs to (by id) and the one deciding for it now
  // (another while it is lent).
  uint32_t home_group(uint32_t device) const noexcept { return group_of(config_, device); }
  uint32_t owner_group(uint32_t device) const;
  uint32_t groups() const noexcept { return static_cast<uint32_t>(groups_.size()); }

  // What reached each level: calls a group settled alone, and escalations
  // (calls the root had to decide; each is a message up and one down).
  struct Traffic {
    uint64_t group_calls = 0;
    uint64_t root_calls = 0;
  };
  const Traffic& traffic() const noexcept { return traffic_; }

 private:
  Scheduler& group(uint32_t g);
  Scheduler& owner(uint32_t device);
  const Scheduler& owner(uint32_t device) const;
  uint32_t offset(uint32_t g) const;
  void count_ranks();
  std::vector<Action> lift(uint32_t g, std::vector<Action> actions);
  std::vector<Action> escalated(uint32_t g, const Action& escalation, bool memory_tier_ok, double t);
  std::vector<Action> lend_to_waiting(uint32_t device, double t);
  void lend(uint32_t device, uint32_t to);
  std::vector<Action> emit(std::vector<Action> actions);

  Config config_;
  uint32_t world_size_;
  bool started_ = false;
  std::vector<std::unique_ptr<Scheduler>> groups_;
  std::vector<uint32_t> ranks_;                  // ranks per group, set at start
  std::vector<uint32_t> first_;                  // each group's first global rank
  std::unordered_map<uint32_t, uint32_t> lent_;  // device -> the group it is lent to
  std::vector<uint32_t> waiting_;                // paused: groups with a missing rank, oldest first
  std::vector<Action> history_;
  Traffic traffic_;
};

}  // namespace sigma::scheduler
