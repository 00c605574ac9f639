// Contained recovery's decisions (contained.hpp).
#include "runtime/agent/contained.hpp"

#include <algorithm>
#include <stdexcept>

namespace sigma::runtime::agent::contained {

std::vector<uint32_t> share_of(uint32_t microbatches, const std::vector<uint32_t>& live, uint32_t replica) {
  const auto at = std::find(live.begin(), live.end(), replica);
  if (at == live.end()) throw std::invalid_argument("replica " + std::to_string(replica) + " is not live");
  const auto index = static_cast<uint32_t>(at - live.begin());
  std::vector<uint32_t> mine;
  for (uint32_t m = index; m < microbatches; m += static_cast<uint32_t>(live.size())) mine.push_back(m);
  return mine;
}

Machine::Group::Group() = default;

const char* stage_name(Stage s) {
  switch (s) {
    case Stage::healthy:
      return "healthy";
    case Stage::stopping:
      return "stopping";
    case Stage::waiting:
      return "waiting";
    case Stage::handing:
      return "handing";
  }
  return "?";
}

Machine::Machine(std::vector<uint32_t> replica_of, Options options)
    : replica_of_(std::move(replica_of)), o_(options) {
  if (replica_of_.empty()) throw std::invalid_argument("contained recovery needs at least one rank");
  replicas_ = *std::max_element(replica_of_.begin(), replica_of_.end()) + 1;
  groups_.resize(replicas_);
  for (uint32_t r = 0; r < replica_of_.size(); ++r) groups_[replica_of_[r]].ranks.push_back(r);
  for (uint32_t q = 0; q < replicas_; ++q) {
    if (groups_[q].ranks.size() != groups_[0].ranks.size())
      throw std::invalid_argument("replica " + std::to_string(q) + " has " +
                                  std::to_string(groups_[q].ranks.size()) + " ranks, replica 0 has " +
                                  std::to_string(groups_[0].ranks.size()) +
                                  ": replicas must be the same size");
  }
}

std::vector<uint32_t> Machine::live() const {
  std::vector<uint32_t> l;
  for (uint32_t q = 0; q < replicas_; ++q)
    if (groups_[q].stage == Stage::healthy) l.push_back(q);
  return l;
}

bool Machine::contains(uint32_t rank) const {
  return !exact_ && groups_.at(replica_of_.at(rank)).stage == Stage::healthy && live().size() > 1;
}

Actions Machine::take() {
  Actions a;
  a.swap(out_);
  return a;
}

bool Machine::handing_any() const {
  return std::any_of(groups_.begin(), groups_.end(),
                     [](const Group& g) { return g.stage == Stage::handing; });
}

// The lowest healthy replica gives the state (deterministic, and every
// rank of a replica holds the same data-parallel state).
std::optional<uint32_t> Machine::donor_for(uint32_t replica) const {
  for (uint32_t q = 0; q < replicas_; ++q)
    if (q != replica && groups_[q].stage == Stage::healthy) return q;
  return std::nullopt;
}

Actions Machine::fault(uint32_t rank, FaultKind kind, const std::string& cause, double t) {
  t_ = t;
  const uint32_t q = replica_of_.at(rank);
  if (kind == FaultKind::hung) out_.push_back(KillRank{rank});
  if (exact_) return take();  // the exact round in progress takes it
  Group& g = groups_[q];
  switch (g.stage) {
    case Stage::healthy:
      if (live().size() == 1) {
        fall_back(replicas_ == 1 ? "one replica: " + cause
                                 : "no healthy replica left to keep stepping: " + cause);
        break;
      }
      stop(q, cause, t);
      lose(rank, kind);
      g.out.insert(rank);
      reform_now();
      void_handoffs_from(q);
      maybe_waiting(q);
      maybe_hand_off();
      break;
    case Stage::stopping:
    case Stage::waiting:
      lose(rank, kind);
      g.out.insert(rank);
      maybe_waiting(q);
      break;
    case Stage::handing:
      fault_while_handing(q, rank, kind);
      break;
  }
  return take();
}

void Machine::stop(uint32_t replica, const std::string& cause, double t) {
  Group& g = groups_[replica];
  g.stage = Stage::stopping;
  g.stop_s = t;
  g.out.clear();
  g.degraded_from = steps_done_;
  g.incident = {{"replica", replica}, {"cause", cause}, {"fault_s", t}, {"step", steps_done_}};
  out_.push_back(StopRanks{replica, g.ranks, cause});
  note({{"event", "replica_stopped"}, {"replica", replica}, {"cause", cause}, {"step", steps_done_}});
}

void Machine::lose(uint32_t rank, FaultKind kind) {
  groups_[replica_of_[rank]].lost.insert(rank);
  out_.push_back(ReplaceRank{rank, kind == FaultKind::device_lost});
}

// Its spare (or a parked rank) died before the boundary: the hand-off is
// void. The healthy ranks are told at once (a new epoch over the same live
// set supersedes the rejoin they were waiting for); the replica's other
// ranks leave the hand-off they wait in, and it waits for its new spare.
void Machine::fault_while_handing(uint32_t replica, uint32_t rank, FaultKind kind) {
  restart(replica, "rank " + std::to_string(rank) + " failed");
  lose(rank, kind);
  groups_[replica].out.insert(rank);
  reform_now();
  maybe_waiting(replica);
  maybe_hand_off();
}

// A hand-off to `replica` is void: its ranks are stopped again (each must
// leave the groups it waits to form, or is killed after the grace) and it
// takes state in the next hand-off.
void Machine::restart(uint32_t replica, const std::string& why) {
  Group& g = groups_[replica];
  note({{"event", "handoff_void"}, {"replica", replica}, {"why", why}});
  g.stage = Stage::stopping;
  g.stop_s = t_;
  g.out.clear();
  g.donor.reset();
  out_.push_back(StopRanks{replica, g.ranks, "hand-off void: " + why});
}

// `donor` stopped: a replica taking its state waits for another donor.
void Machine::void_handoffs_from(uint32_t donor) {
  for (uint32_t q = 0; q < replicas_; ++q) {
    const Group& g = groups_[q];
    if (g.stage == Stage::handing && g.donor == donor)
      restart(q, "donor replica " + std::to_string(donor) + " failed");
  }
}

void Machine::reform_now() {
  ++epoch_;
  out_.push_back(Reform{epoch_, live(), {}, std::nullopt, std::nullopt});
}

void Machine::maybe_waiting(uint32_t replica) {
  Group& g = groups_[replica];
  // `out` holds only the group's own ranks.
  if (g.stage != Stage::stopping || g.out.size() < g.ranks.size()) return;
  g.stage = Stage::waiting;
  g.incident["stopped_s"] = t_;
}

// The first waiting replica whose every rank has a process takes the state
// of a donor at a boundary the healthy ranks have not reached.
void Machine::maybe_hand_off() {
  if (handing_any()) return;
  for (uint32_t q = 0; q < replicas_; ++q) {
    Group& g = groups_[q];
    if (g.stage != Stage::waiting || !g.lost.empty()) continue;
    const auto donor = donor_for(q);
    if (!donor)
      return fall_back("no healthy replica left to give replica " + std::to_string(q) + " its state");
    auto joined = live();
    joined.insert(std::upper_bound(joined.begin(), joined.end(), q), q);
    g.stage = Stage::handing;
    g.donor = donor;
    g.boundary = steps_done_ + o_.boundary_lead;
    g.handoff_epoch = ++epoch_;
    g.rejoin_epoch = 0;
    g.replayed.clear();
    g.replaying_s = -1;
    g.incident["handoff_s"] = t_;
    g.incident["donor"] = *donor;
    g.incident["boundary"] = g.boundary;
    out_.push_back(Reform{epoch_, joined, {q}, donor, g.boundary});
    note({{"event", "handoff"},
          {"replica", q},
          {"donor", *donor},
          {"boundary", g.boundary},
          {"epoch", epoch_}});
    return;
  }
}

Actions Machine::rank_out(uint32_t rank, double t) {
  t_ = t;
  const uint32_t q = replica_of_.at(rank);
  if (exact_ || groups_[q].stage != Stage::stopping) return take();
  groups_[q].out.insert(rank);
  maybe_waiting(q);
  maybe_hand_off();
  return take();
}

Actions Machine::reported(uint32_t rank, const std::string& cause, double t) {
  t_ = t;
  const uint32_t q = replica_of_.at(rank);
  if (exact_) return take();
  Group& g = groups_[q];
  if (g.stage == Stage::healthy) {
    if (live().size() == 1) {
      fall_back(replicas_ == 1 ? "one replica: " + cause
                               : "no healthy replica left to keep stepping: " + cause);
      return take();
    }
    stop(q, cause, t);
    reform_now();
    void_handoffs_from(q);
  } else if (g.stage == Stage::handing) {
    restart(q, cause);
    reform_now();  // supersedes the rejoin the healthy ranks wait for
  }
  g.out.insert(rank);
  maybe_waiting(q);
  maybe_hand_off();
  return take();
}

// Once every rank of the handing replica has replayed to within the slack
// of the live set (or has replayed for the catch-up limit without getting
// there), the rejoin: at the end of a step the live set has not reached,
// the stream stops and the groups re-form with the replica in.
Actions Machine::replayed(uint32_t rank, uint64_t step, double t) {
  t_ = t;
  const uint32_t q = replica_of_.at(rank);
  Group& g = groups_[q];
  if (exact_ || g.stage != Stage::handing || g.rejoin_epoch != 0 || step <= g.boundary) return take();
  uint64_t& mine = g.replayed[rank];
  mine = std::max(mine, step);
  if (g.replayed.size() < g.ranks.size()) return take();  // a rank still waits for the state
  uint64_t slowest = UINT64_MAX;
  for (uint32_t r : g.ranks) {
    const auto it = g.replayed.find(r);
    if (it == g.replayed.end()) return take();  // a rank still waits for the state
    slowest = std::min(slowest, it->second);
  }
  if (g.replaying_s < 0) g.replaying_s = t;
  const bool behind = slowest + 1 + o_.catch_up_slack < steps_done_;
  if (behind && t - g.replaying_s < o_.catch_up_limit_s) return take();
  if (behind) {
    g.incident["catch_up"] = "limit";
    note({{"event", "catch_up_limit"},
          {"replica", q},
          {"behind_steps", steps_done_ - slowest - 1},
          {"replayed_s", t - g.replaying_s},
          {"note", "its replay is no faster than the live replicas' steps: they wait for it at the rejoin"}});
  }
  auto joined = live();
  joined.insert(std::upper_bound(joined.begin(), joined.end(), q), q);
  g.rejoin_epoch = ++epoch_;
  const uint64_t boundary = std::max(steps_done_, slowest + 1) + o_.boundary_lead;
  g.incident["caught_up_s"] = t;
  g.incident["rejoin_boundary"] = boundary;
  out_.push_back(Reform{epoch_, joined, {q}, g.donor, boundary, true});
  note({{"event", "rejoin"}, {"replica", q}, {"boundary", boundary}, {"epoch", epoch_}});
  return take();
}

Actions Machine::spare_ready(uint32_t rank, double t) {
  t_ = t;
  const uint32_t q = replica_of_.at(rank);
  if (exact_ || groups_[q].lost.erase(rank) == 0) return take();
  maybe_hand_off();
  return take();
}

Actions Machine::step_done(uint64_t step, double t) {
  t_ = t;
  if (step <= steps_done_) return take();
  if (!exact_ && live().size() < replicas_) degraded_steps_ += step - steps_done_;
  steps_done_ = step;
  return take();
}

Actions Machine::reformed(uint64_t epoch, double t) {
  t_ = t;
  for (uint32_t q = 0; q < replicas_; ++q) {
    Group& g = groups_[q];
    if (g.stage != Stage::handing || g.rejoin_epoch == 0 || g.rejoin_epoch != epoch) continue;
    g.stage = Stage::healthy;
    g.donor.reset();
    g.incident["rejoined_s"] = t;
    g.incident["degraded_steps"] = steps_done_ - g.degraded_from;
    g.incident["end"] = "rejoined";
    note({{"event", "replica_rejoined"}, {"replica", q}, {"epoch", epoch}, {"step", steps_done_}});
    incidents_.push_back(std::move(g.incident));
    g.incident = nullptr;
  }
  maybe_hand_off();
  return take();
}

// Every open incident ends in the exact round; the replicas stay as they
// are until it is over.
void Machine::fall_back(const std::string& cause) {
  exact_ = true;
  for (Group& g : groups_) {
    if (g.stage == Stage::healthy) continue;
    g.incident["end"] = "exact round";
    g.incident["degraded_steps"] = steps_done_ - g.degraded_from;
    incidents_.push_back(std::move(g.incident));
    g.incident = nullptr;
  }
  out_.push_back(ExactRound{cause});
  note({{"event", "contained_fallback"}, {"cause", cause}});
}

Actions Machine::exact_round(const std::string& cause, double t) {
  t_ = t;
  if (!exact_) fall_back(cause);
  return take();
}

Actions Machine::exact_done(double t) {
  t_ = t;
  if (!exact_) return take();
  exact_ = false;
  for (Group& g : groups_) {
    g.stage = Stage::healthy;
    g.out.clear();
    g.lost.clear();
    g.donor.reset();
  }
  ++epoch_;
  note({{"event", "contained_resumed"}, {"epoch", epoch_}});
  return take();
}

// A stopping rank that has not left its collectives within the grace is
// killed and replaced.
Actions Machine::tick(double t) {
  t_ = t;
  if (exact_) return take();
  for (uint32_t q = 0; q < replicas_; ++q) {
    Group& g = groups_[q];
    if (g.stage != Stage::stopping || t - g.stop_s <= o_.abort_grace_s) continue;
    for (uint32_t r : g.ranks) {
      if (g.out.contains(r)) continue;
      out_.push_back(KillRank{r});
      lose(r, FaultKind::process_ended);
      g.out.insert(r);
    }
    maybe_waiting(q);
  }
  maybe_hand_off();
  return take();
}

}  // namespace sigma::runtime::agent::contained
