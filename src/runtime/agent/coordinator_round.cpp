// The coordinator's recovery round: abort the survivors, collect what each
// holds, choose the restore, assign the next generation, watch it join and
// get back to the step it had reached (the bounds in coordinator.hpp).
#include "runtime/agent/coordinator.hpp"

#include <algorithm>

namespace sigma::runtime::agent {

// A fault starts a round, or joins the one in progress (recovery_round.hpp).
// Reports are never reset when it joins: one made after the assignment went
// out (a survivor whose new communicator failed with the spare) is the
// report of what it holds now, and it will not send another: resetting it
// would have the agent kill a healthy rank for waiting.
void Coordinator::start_round(const std::string& cause, double fault_s, bool from_report) {
  // Contained: a round of the coordinator's own (a stalled step, a failed
  // assignment) takes every replica, a stopped one too; the machine knows.
  if (contained_ && !contained_->exact())
    for (const auto& a : contained_->exact_round(cause, t_))
      if (const auto* n = std::get_if<contained::Note>(&a)) record(n->entry);
  const bool reset_reports = round_.fault(cause, fault_s, from_report, t_, reached());
  std::vector<Slot*> gone;
  for (Slot* m : members()) {
    if (m->phase == Phase::done) {
      // It finished its steps, but a peer did not: it rejoins (its session
      // waits for the goodbye and recovers on this abort), or, when it is
      // no longer there, it is replaced like any lost rank.
      m->phase = Phase::active;
      if (!m->alive || !m->connected) gone.push_back(m);
      m->reported = false;
    }
    if (m->phase == Phase::active) {
      if (reset_reports && !waits_stopped(*m)) m->reported = false;
      m->abort_sent = !m->reported;
      send(*m, protocol::Abort{cause});
    }
  }
  for (Slot& s : slots_) {
    if (s.phase == Phase::retiring) send(s, protocol::Abort{cause});
  }
  record(journal::encode(journal::RecoveryStarted{cause, round_.reached()}));
  for (Slot* m : gone)
    fault(*m, {Fault::Kind::left_early, "it had finished and left before a peer failed in the last steps"},
          t_);
}

void Coordinator::fail_assignment(const std::string& why) {
  round_.assignment_failed(why);
  start_round(why, round_.fault_s());
}

// Paused for want of a device while a device is validating (a crashed
// device's fresh worker, readmitted: --readmit-crashed): the round waits
// for its verdict, up to the validation timeout, rather than end the job
// a moment before a spare is back.
bool Coordinator::awaits_validation() const {
  if (t_ - round_.paused_s() >= o_.validate_timeout_s) return false;
  for (const Slot& s : slots_)
    if (s.phase == Phase::starting && scheduler_.state(s.device) == scheduler::DeviceState::validating)
      return true;
  return false;
}

// Where the memory tier keeps the replicas of the world as assigned now.
FailureDomains::Placement Coordinator::placement() {
  std::vector<uint32_t> devices;
  for (uint32_t r = 0; r < scheduler_.world_size(); ++r) devices.push_back(slot_of_rank(r)->device);
  return domains_.place(devices, o_.replicas);
}

protocol::Assign Coordinator::assignment(uint32_t rank, uint64_t generation, RestoreTier tier, uint64_t index,
                                         const std::vector<std::pair<uint32_t, uint32_t>>& handoff,
                                         const FailureDomains::Placement& where) {
  const uint32_t world = scheduler_.world_size();
  protocol::Assign a{rank, world, generation, tier, index, handoff};
  a.domains = where.domains;
  a.replicas = o_.replicas;
  const uint32_t host = slot_of_rank(rank)->node;
  for (uint32_t r = 0; r < world; ++r) a.host_ranks += slot_of_rank(r)->node == host ? 1 : 0;
  contained_fields(a);
  return a;
}

// What every rank holds, by rank (empty when a rank has no device).
std::vector<recovery::RankHoldings> Coordinator::holdings() {
  std::vector<recovery::RankHoldings> ranks(scheduler_.world_size());
  for (uint32_t r = 0; r < ranks.size(); ++r) {
    const Slot* s = slot_of_rank(r);
    if (s == nullptr) return {};
    // Only a rank that has joined a generation holds a state of its own; a
    // spare whose hand-off failed is still waiting for its neighbour's.
    ranks[r].survived = s->phase == Phase::active && s->joined_gen > 0;
    if (ranks[r].survived) {
      ranks[r].own = s->own;
      ranks[r].replicas = s->replicas;
    }
    if (auto d = disk_.find(r); d != disk_.end()) ranks[r].disk = d->second;
  }
  return ranks;
}

// Every rank discards its checkpoints after the step the job goes back to
// (they describe steps that run again), so none of them is held any more.
void Coordinator::forget_disk_after(uint64_t index) {
  for (auto& [rank, steps] : disk_) steps.erase(steps.upper_bound(index), steps.end());
}

void Coordinator::advance_round() {
  if (!round_.active()) return;
  if (!round_.assigned()) {
    auto ms = members();
    // A survivor that cannot leave its collective is as good as hung. Every
    // one overdue goes at once: each one's fault would restart the grace.
    std::vector<Slot*> overdue;
    for (Slot* m : ms)
      if (m->phase == Phase::active && !m->reported && round_.abort_overdue(t_, o_.abort_grace_s))
        overdue.push_back(m);
    for (Slot* m : overdue) {
      kill(*m);
      fault(*m,
            {Fault::Kind::abort_unanswered,
             "did not answer the abort within " + std::to_string(o_.abort_grace_s) + " s"},
            t_);
    }
    if (!overdue.empty()) return;
    for (Slot* m : ms) {
      if (m->phase == Phase::active && !m->reported) return;
      if (m->phase == Phase::starting) return;
    }
    assign_generation();
    return;
  }
  if (!round_.rejoined()) {
    if (round_.assignment_overdue(t_, o_.recovery_timeout_s)) return assignment_overdue();
    for (Slot* m : members()) {
      if (m->joined_gen != generation_) return;
    }
    rejoined();
  }
  if (progress() >= round_.reached()) {
    record(journal::encode(journal::Recovered{round_.reached(), t_ - round_.fault_s()}));
    round_.recovered(t_);
    if (contained_ && contained_->exact()) apply(contained_->exact_done(t_));
  }
}

void Coordinator::assign_generation() {
  if (round_.paused() && awaits_validation()) return;
  if (round_.paused()) {
    end("paused", round_.pause_reason() + "; " + resume_hint("when a device is repaired"), job_exit::paused,
        journal::Event::paused);
    return;
  }
  const auto ranks = holdings();
  const auto plan = ranks.empty() ? std::nullopt : recovery::plan_restore(ranks, reached());
  if (!plan) {
    // What the memory tier held, so that the journal says which state was lost.
    const std::string memory = ranks.empty() ? "a rank has no device" : recovery::describe_memory(ranks);
    end("unrecoverable", "no state to restore: in memory, " + memory + "; and " + no_disk_why(),
        job_exit::unrecoverable, journal::Event::unrecoverable);
    return;
  }
  ++generation_;
  forget_disk_after(plan->index);
  std::vector<uint32_t> devices;
  for (uint32_t r = 0; r < scheduler_.world_size(); ++r) {
    Slot* s = slot_of_rank(r);
    if (s->phase == Phase::spare) {
      ledger_.idle_spares_s += t_ - s->spare_since;
      s->phase = Phase::active;
      s->newcomer = true;
    }
    s->rank = r;
    s->reported = false;
    s->abort_sent = false;
    devices.push_back(s->device);
  }
  const auto where = placement();
  std::vector<protocol::Assign> assigns;
  for (uint32_t r = 0; r < scheduler_.world_size(); ++r)
    assigns.push_back(assignment(r, generation_, plan->tier, plan->index, plan->handoff, where));
  // Every survivor's restored snapshot in its holder before the rejoin,
  // under the placement the sessions take from their assignment.
  if (plan->tier == RestoreTier::memory) {
    const auto refresh = recovery::refresh_moves(ranks, plan->index, protocol::replica_placement(assigns[0]));
    for (auto& a : assigns) a.refresh = refresh;
  }
  for (uint32_t r = 0; r < scheduler_.world_size(); ++r) send(*slot_of_rank(r), assigns[r]);
  for (Slot& s : slots_) {
    if (s.phase == Phase::retiring) send(s, protocol::Retire{"moved off a suspect device"});
  }
  round_.assigned(t_, plan->index, plan->tier);
  record(journal::encode(journal::Assigned{generation_, name(plan->tier), plan->index, plan->handoff, devices,
                                           where.domains, where.across}));
}

// The assignment went out recovery_timeout_s ago and not every rank has
// joined. A spare that took a rank and did not join while others did is
// the culprit (stuck in its hand-off or its communicator): it is replaced.
// Otherwise nobody stands out (a survivor may be stuck waiting on a hung
// peer): the assignment failed, everyone is aborted and reports again, and
// whoever cannot leave within abort_grace_s is replaced then.
void Coordinator::assignment_overdue() {
  std::vector<Slot*> late_newcomers;
  bool any_joined = false;
  size_t late = 0;
  for (Slot* m : members()) {
    if (m->joined_gen == generation_) {
      any_joined = true;
    } else if (!m->reported) {
      ++late;
      if (m->newcomer) late_newcomers.push_back(m);
    }
  }
  const std::string within =
      "generation " + std::to_string(generation_) + " within " + std::to_string(o_.recovery_timeout_s) + " s";
  record(journal::encode(journal::RecoveryOverdue{generation_, late}));
  if (!any_joined || late_newcomers.empty()) {
    fail_assignment((any_joined ? std::to_string(late) + " rank(s) did not join " : "no rank joined ") +
                    within);
    return;
  }
  for (Slot* m : late_newcomers) {
    kill(*m);
    fault(*m,
          {Fault::Kind::join_stuck,
           "did not join " + within + " (stuck in its hand-off, communicator or probe)"},
          round_.assigned_s());
  }
}

void Coordinator::rejoined() {
  double comm_s = 0, restore_s = 0;
  for (Slot* m : members()) {
    comm_s = std::max(comm_s, m->comm_s);
    restore_s = std::max(restore_s, m->restore_s);
  }
  const auto c = round_.rejoined(t_, generation_, comm_s, restore_s);
  ledger_.detection_s += c.detection_s;
  ledger_.restart_s += c.restart_s;
  ledger_.restore_s += c.restore_s;
  ledger_.recomputed_steps += c.recomputed_steps;
  record(journal::encode(journal::Rejoined{generation_, t_ - round_.fault_s(), c.recomputed_steps}));
}

}  // namespace sigma::runtime::agent
