// The coordinator's side of contained recovery: it feeds the contained
// machine (contained.hpp) the faults, the stopped ranks' reports, the
// spares that are ready, the live set's progress and the Reforms carried
// out, and carries out what the machine decides with the agent's commands.
// An exact round the machine falls back to is the coordinator's own
// (coordinator_round.cpp).
#include "runtime/agent/coordinator.hpp"

#include <algorithm>
#include <cstdint>

namespace sigma::runtime::agent {

bool Coordinator::parked(const Slot& s) const {
  if (!contained_ || contained_->exact() || s.rank < 0) return false;
  return contained_->stage(static_cast<uint32_t>(s.rank) / replica_size_) != contained::Stage::healthy;
}

bool Coordinator::waits_stopped(const Slot& s) const {
  if (!contained_ || s.rank < 0 || !s.reported) return false;
  return contained_->stage(static_cast<uint32_t>(s.rank) / replica_size_) != contained::Stage::healthy;
}

// The replica of every rank and the live set; the exact round's world
// holds every replica (the stopped ones too).
void Coordinator::contained_fields(protocol::Assign& a) const {
  if (replica_size_ == 0) return;
  for (uint32_t r = 0; r < world_; ++r) a.replica_of.push_back(r / replica_size_);
  if (contained_) {
    a.epoch = contained_->epoch();
    a.contained = true;
    if (!contained_->exact()) {
      a.live = contained_->live();
      return;
    }
  }
  for (uint32_t q = 0; q < world_ / replica_size_; ++q) a.live.push_back(q);
}

// A fault of an active rank outside an exact round: its replica stops and
// the others go on, unless the machine says the exact round must run (then
// the caller starts it). The scheduler replaces the lost device as in a
// round; with no spare the replica waits for one, the job goes on.
bool Coordinator::contained_takes(Slot& s, const Fault& f, const std::string& words) {
  if (!contained_ || contained_->exact() || round_.active()) return false;
  const auto kind = f.device_said() ? contained::Machine::FaultKind::device_lost
                                    : contained::Machine::FaultKind::process_ended;
  const auto actions = contained_->fault(static_cast<uint32_t>(s.rank), kind, words, t_);
  if (contained_->exact()) {
    for (const auto& a : actions)
      if (const auto* n = std::get_if<contained::Note>(&a)) record(n->entry);
    return false;
  }
  apply(actions);
  act(scheduler_.on_fault(s.device, words, true, t_));
  return true;
}

// A rank of a live replica reported a failure outside an exact round: its
// replica stops (the fault behind it may not be known yet: a peer's
// process ending is seen a moment later). False when the machine says the
// exact round must run (the caller starts it).
bool Coordinator::contained_reported(Slot& s, const std::string& words) {
  if (!contained_ || contained_->exact() || round_.active() || s.rank < 0) return false;
  const auto actions = contained_->reported(static_cast<uint32_t>(s.rank), words, t_);
  if (contained_->exact()) {
    for (const auto& a : actions)
      if (const auto* n = std::get_if<contained::Note>(&a)) record(n->entry);
    return false;
  }
  apply(actions);
  s.reported = true;  // it has left its collectives; the Abort its replica's stop sent it changes nothing
  return true;
}

// A proactive migration under contained recovery is a hand-off: the
// suspect's process is let go (its state lives in every other replica),
// its replica stops as after a fault, the spare reserved for it takes the
// rank and the replica rejoins from a live peer; the others step on. False
// while that cannot be (its replica is out, or no other one steps): the
// migration waits, no stop of the world for a device that still works. It
// also waits until every rank has finished a step: before that the ranks
// are still forming their groups, and stopping them costs more than the
// warning does.
bool Coordinator::contained_migrates(Slot& s, const std::string& cause) {
  if (s.rank < 0 || !contained_->contains(static_cast<uint32_t>(s.rank))) return false;
  for (const Slot* m : members())
    if (m->phase == Phase::active && m->last_step < 0) return false;
  const auto rank = static_cast<uint32_t>(s.rank);
  record(journal::encode(journal::MigrationStarted{s.device, s.rank, reached()}));
  s.phase = Phase::retiring;  // its end is expected
  kill(s);
  apply(contained_->fault(rank, contained::Machine::FaultKind::process_ended, cause, t_));
  act(scheduler_.on_fault(s.device, cause, true, t_));
  return true;
}

void Coordinator::apply(const contained::Actions& actions) {
  for (const auto& action : actions) {
    if (const auto* stop = std::get_if<contained::StopRanks>(&action)) {
      for (uint32_t r : stop->ranks) {
        Slot* m = slot_of_rank(r);
        if (m == nullptr || m->phase != Phase::active) continue;
        m->reported = false;
        send(*m, protocol::Abort{"replica " + std::to_string(stop->replica) + " stops: " + stop->cause});
      }
    } else if (const auto* k = std::get_if<contained::KillRank>(&action)) {
      if (Slot* m = slot_of_rank(k->rank)) kill(*m);
    } else if (const auto* rep = std::get_if<contained::ReplaceRank>(&action)) {
      // A rank the machine gave up on while it still runs (it did not leave
      // its collectives): a fault like any other, which replaces it.
      Slot* m = slot_of_rank(rep->rank);
      if (m != nullptr && m->phase == Phase::active)
        fault(*m,
              {Fault::Kind::abort_unanswered,
               "did not leave its collectives within " + std::to_string(o_.abort_grace_s) + " s"},
              t_);
    } else if (const auto* r = std::get_if<contained::Reform>(&action)) {
      send_reform(*r);
    } else if (const auto* x = std::get_if<contained::ExactRound>(&action)) {
      start_round(x->cause, t_);
    } else if (const auto* n = std::get_if<contained::Note>(&action)) {
      record(n->entry);
    }
  }
}

// A rank of a rejoining replica: it takes its state from the donor. With
// a rank still missing (no spare for another replica) there is no world to
// place the memory tier's replicas across yet: the rank keeps its last.
protocol::Assign Coordinator::peer_assignment(uint32_t rank) {
  if (members().size() == scheduler_.world_size())
    return assignment(rank, generation_, RestoreTier::peer, 0, {}, placement());
  protocol::Assign a{rank, world_, generation_, RestoreTier::peer, 0, {}};
  a.replicas = o_.replicas;
  contained_fields(a);
  return a;
}

// To every rank of the new live set; a rank of a rejoining replica is
// assigned first (a spare becomes active). A hand-off makes the world
// whole again with spares in it: the Reform carries every rank's domain,
// so that every rank places its memory tier's replicas anew alike.
void Coordinator::send_reform(const contained::Reform& r) {
  std::vector<Slot*> to;
  std::vector<uint32_t> ranks;
  for (uint32_t q : r.live) {
    const bool rejoins = std::find(r.rejoining.begin(), r.rejoining.end(), q) != r.rejoining.end();
    for (uint32_t rank = q * replica_size_; rank < (q + 1) * replica_size_; ++rank) {
      Slot* m = slot_of_rank(rank);
      if (m == nullptr) continue;
      ranks.push_back(rank);
      to.push_back(m);
      if (!rejoins || r.rejoin) continue;
      if (m->phase == Phase::spare) {
        ledger_.idle_spares_s += t_ - m->spare_since;
        m->phase = Phase::active;
        m->newcomer = true;
      }
      m->rank = rank;
      m->reported = false;
      send(*m, peer_assignment(rank));
    }
  }
  protocol::Reform message{r.epoch, r.live, r.rejoining, r.donor, r.boundary, r.rejoin};
  if (r.boundary && members().size() == scheduler_.world_size()) message.domains = placement().domains;
  for (Slot* m : to) send(*m, message);
  reform_ranks_[r.epoch] = std::move(ranks);
}

// The newest epoch every one of its ranks has carried out is over (an
// older one it superseded with it).
void Coordinator::reformed_check() {
  for (auto it = reform_ranks_.rbegin(); it != reform_ranks_.rend(); ++it) {
    const uint64_t epoch = it->first;
    const bool done = std::all_of(it->second.begin(), it->second.end(), [&](uint32_t rank) {
      const Slot* m = slot_of_rank(rank);
      return m != nullptr && m->epoch >= epoch;
    });
    if (!done) continue;
    reform_ranks_.erase(reform_ranks_.begin(), reform_ranks_.upper_bound(epoch));
    apply(contained_->reformed(epoch, t_));
    return;
  }
}

// A step done: the live set's progress, or a handing replica's replay.
void Coordinator::contained_step(const Slot& s, uint64_t step) {
  if (!contained_) return;
  if (s.rank >= 0 && parked(s)) {
    apply(contained_->replayed(static_cast<uint32_t>(s.rank), step, t_));
    return;
  }
  apply(contained_->step_done(reached(), t_));
  int64_t slowest = INT64_MAX;
  for (const Slot& m : slots_)
    if (m.rank >= 0 && m.phase == Phase::active && !parked(m)) slowest = std::min(slowest, m.last_step);
  if (slowest == INT64_MAX) return;
  const auto done = static_cast<uint64_t>(slowest + 1);  // lower after a rollback or with a newcomer
  if (done > live_done_) step_edge_ = true;
  live_done_ = done;
}

// Spares that are ready for a waiting replica's lost ranks, and the
// machine's own clock (a stopping rank past its grace).
void Coordinator::contained_tick() {
  if (!contained_ || contained_->exact() || !started_) return;
  for (uint32_t q = 0; q < contained_->replicas(); ++q) {
    if (contained_->stage(q) != contained::Stage::waiting) continue;
    for (uint32_t rank = q * replica_size_; rank < (q + 1) * replica_size_; ++rank) {
      const Slot* m = slot_of_rank(rank);
      if (m != nullptr && m->phase == Phase::spare && m->connected) apply(contained_->spare_ready(rank, t_));
    }
  }
  apply(contained_->tick(t_));
}

}  // namespace sigma::runtime::agent
