// The coordinator's recovery round: abort the survivors, collect what each
// holds, choose the restore, assign the next generation, watch it join and
// get back to the step it had reached (the bounds in coordinator.hpp).
#include "runtime/agent/coordinator.hpp"

#include <algorithm>

namespace sigma::runtime::agent {

using json = nlohmann::json;

namespace {

// Assignments that may fail (no rank could build the communicator or
// restore) before the job pauses with the reason instead of trying for ever.
constexpr uint32_t kMaxFailedAssignments = 3;

}  // namespace

void Coordinator::start_round(const std::string& cause, double fault_s, bool from_report) {
  bool reset_reports = true;
  if (round_.active && !round_.rejoined) {
    // A second fault before the first recovery finished: the same round goes
    // on with one more casualty. A survivor's report often arrives before
    // the exit is reaped: the fault itself is the better headline.
    if (round_.cause_is_report) {
      round_.cause = cause + " (first seen as: " + round_.cause + ")";
      round_.cause_is_report = from_report;
    } else {
      round_.cause += "; then " + cause;
    }
    incident_["cause"] = round_.cause;
    // Reports are never reset here: one made after the assignment went out
    // (a survivor whose new communicator failed with the spare) is the
    // report of what it holds now, and it will not send another: resetting
    // it would have the agent kill a healthy rank for waiting.
    reset_reports = false;
    round_.assigned = false;
  } else {
    if (round_.active) {
      incident_["back_at_reached_step_s"] = nullptr;
      incidents_.push_back(incident_);
    }
    round_ = Round{};
    round_.active = true;
    round_.cause = cause;
    round_.cause_is_report = from_report;
    round_.fault_s = fault_s;
    round_.detected_s = t_;
    round_.reached = reached();
    incident_ = {
        {"cause", cause}, {"fault_s", fault_s}, {"detected_s", t_}, {"reached_step", round_.reached}};
  }
  round_.abort_s = t_;
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
      if (reset_reports) m->reported = false;
      m->abort_sent = !m->reported;
      send(*m, protocol::Abort{cause});
    }
  }
  for (Slot& s : slots_) {
    if (s.phase == Phase::retiring) send(s, protocol::Abort{cause});
  }
  record(journal::encode(journal::RecoveryStarted{cause, round_.reached}));
  for (Slot* m : gone)
    fault(*m, {Fault::Kind::left_early, "it had finished and left before a peer failed in the last steps"},
          t_);
}

void Coordinator::fail_assignment(const std::string& why) {
  if (++round_.failed_assignments >= kMaxFailedAssignments) {
    round_.paused = true;
    round_.pause_reason =
        "recovery failed " + std::to_string(round_.failed_assignments) + " times; the last: " + why;
  }
  start_round(why, round_.fault_s);
}

std::optional<recovery::RestorePlan> Coordinator::plan_restore() {
  std::vector<recovery::RankHoldings> ranks(scheduler_.world_size());
  for (uint32_t r = 0; r < ranks.size(); ++r) {
    const Slot* s = slot_of_rank(r);
    if (s == nullptr) return std::nullopt;
    // Only a rank that has joined a generation holds a state of its own; a
    // spare whose hand-off failed is still waiting for its neighbour's.
    ranks[r].survived = s->phase == Phase::active && s->joined_gen > 0;
    if (ranks[r].survived) {
      ranks[r].own = s->own;
      ranks[r].replica = s->replica;
    }
    if (auto d = disk_.find(r); d != disk_.end()) ranks[r].disk = d->second;
  }
  return recovery::plan_restore(ranks, reached());
}

// Every rank discards its checkpoints after the step the job goes back to
// (they describe steps that run again), so none of them is held any more.
void Coordinator::forget_disk_after(uint64_t index) {
  for (auto& [rank, steps] : disk_) steps.erase(steps.upper_bound(index), steps.end());
}

void Coordinator::advance_round() {
  if (!round_.active) return;
  if (!round_.assigned) {
    auto ms = members();
    for (Slot* m : ms) {
      if (m->phase == Phase::active && !m->reported && t_ - round_.abort_s > o_.abort_grace_s) {
        // A survivor that cannot leave its collective is as good as hung.
        kill(*m);
        fault(*m,
              {Fault::Kind::abort_unanswered,
               "did not answer the abort within " + std::to_string(o_.abort_grace_s) + " s"},
              t_);
        return;
      }
    }
    for (Slot* m : ms) {
      if (m->phase == Phase::active && !m->reported) return;
      if (m->phase == Phase::starting) return;
    }
    assign_generation();
    return;
  }
  if (!round_.rejoined) {
    if (t_ - round_.assigned_s > o_.recovery_timeout_s) return assignment_overdue();
    for (Slot* m : members()) {
      if (m->joined_gen != generation_) return;
    }
    rejoined();
  }
  if (progress() >= round_.reached) {
    incident_["back_at_reached_step_s"] = t_ - round_.fault_s;
    record(journal::encode(journal::Recovered{round_.reached, t_ - round_.fault_s}));
    incidents_.push_back(incident_);
    round_.active = false;
  }
}

void Coordinator::assign_generation() {
  if (round_.paused) {
    end("paused", round_.pause_reason + "; " + resume_hint("when a device is repaired"), job_exit::paused,
        journal::Event::paused);
    return;
  }
  const auto plan = plan_restore();
  if (!plan) {
    end("unrecoverable",
        "no state to restore: the memory replicas of the lost ranks died with them and " + no_disk_why(),
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
    send(*s,
         protocol::Assign{r, scheduler_.world_size(), generation_, plan->tier, plan->index, plan->handoff});
  }
  for (Slot& s : slots_) {
    if (s.phase == Phase::retiring) send(s, protocol::Retire{"moved off a suspect device"});
  }
  round_.assigned = true;
  round_.assigned_s = t_;
  round_.index = plan->index;
  round_.tier = plan->tier;
  record(
      journal::encode(journal::Assigned{generation_, name(plan->tier), plan->index, plan->handoff, devices}));
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
          round_.assigned_s);
  }
}

void Coordinator::rejoined() {
  double comm_s = 0, restore_s = 0;
  for (Slot* m : members()) {
    comm_s = std::max(comm_s, m->comm_s);
    restore_s = std::max(restore_s, m->restore_s);
  }
  round_.rejoined = true;
  const uint64_t redo = round_.reached > round_.index ? round_.reached - round_.index : 0;
  ledger_.detection_s += round_.detected_s - round_.fault_s;
  ledger_.restart_s += std::max(0.0, t_ - round_.detected_s - restore_s);
  ledger_.restore_s += restore_s;
  ledger_.recomputed_steps += redo;
  incident_.update({{"generation", generation_},
                    {"restore", name(round_.tier)},
                    {"index", round_.index},
                    {"recomputed_steps", redo},
                    {"rejoined_s", t_},
                    {"comm_s", comm_s},
                    {"restore_s", restore_s}});
  record(journal::encode(journal::Rejoined{generation_, t_ - round_.fault_s, redo}));
}

}  // namespace sigma::runtime::agent
