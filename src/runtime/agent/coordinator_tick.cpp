// The coordinator's clock: the start, health, proactive migration, the step
// watchdog, stopping, the end of the job, and the report.
#include "runtime/agent/coordinator.hpp"

#include <algorithm>
#include <utility>

namespace sigma::runtime::agent {

using json = nlohmann::json;

Commands Coordinator::tick(double t) {
  t_ = t;
  if (!started_ && !finished()) maybe_start();
  if (ending_.stopping() && !finished()) finish_stop();
  if (!finished()) {
    health_tick();
    maybe_migrate();
    watchdog();
    advance_round();
    contained_tick();
    finish_job();
  }
  // Told to go and still there after the goodbye's grace: killed.
  if (finished() && !over() && ending_.stragglers_due(t_)) {
    for (Slot& s : slots_) kill(s);
  }
  return take();
}

bool Coordinator::over() const {
  if (!finished()) return false;
  for (const Slot& s : slots_) {
    if (s.alive) return false;
  }
  return true;
}

// Admission's verdict (admission.hpp) carried out. Ranks go to the lowest
// device ids that passed, so a job maps the same way every time; a device
// slow to validate is waited for a while.
void Coordinator::maybe_start() {
  Admission::Census c;
  c.passed = static_cast<uint32_t>(scheduler_.spares().size());
  for (const Slot& s : slots_) {
    c.starting += s.phase == Phase::starting;
    c.out += (s.phase == Phase::dead && !s.plain_done) || s.phase == Phase::retiring;
    c.plain += s.plain_done;
    c.running |= s.alive;
  }
  using Kind = Admission::StartVerdict::Kind;
  const auto v = admission_.start(c, t_);
  if (v.kind == Kind::start) return start_job();
  if (v.kind == Kind::plain_program_done) {
    end("done",
        "every worker exited 0 without a sigma session: a plain program ran to its end (sigmarun watched it "
        "for crashes; recovery needs the session)",
        job_exit::done, journal::Event::done_without_session);
    return;
  }
  if (v.drop_silent) {
    for (Slot& s : slots_) {
      if (s.phase != Phase::starting) continue;
      kill(s);
      fault(s,
            {Fault::Kind::never_greeted,
             "never said hello within " + std::to_string(o_.validate_timeout_s) + " s"},
            t_);
    }
  }
  if (v.kind == Kind::too_few) {
    end("unrecoverable",
        "only " + std::to_string(v.usable) + " device(s) passed validation; the job needs " +
            std::to_string(world_),
        job_exit::unrecoverable, std::nullopt);
  }
}

// A job folder with disk checkpoints of every rank (a paused or interrupted
// run) resumes from the newest step they all hold.
void Coordinator::start_job() {
  const uint64_t resume = newest_common_disk(world_);
  for (const auto& a : scheduler_.start(t_)) {
    record(record_of(a));
    Slot& s = slots_[a.device];
    s.rank = a.rank;
    s.phase = Phase::active;
  }
  const auto where = placement();
  for (uint32_t r = 0; r < world_; ++r)
    send(*slot_of_rank(r),
         assignment(r, 1, resume > 0 ? RestoreTier::disk : RestoreTier::none, resume, {}, where));
  if (resume > 0) {
    record(journal::encode(journal::Resumed{resume, o_.job_dir + "/checkpoints"}));
    steps_reached_ = resume;
  }
  generation_ = 1;
  started_ = true;
}

void Coordinator::health_tick() {
  for (const health::Event& e : monitor_.evaluate(t_)) {
    record(record_of(e));
    if (e.kind != health::Event::Kind::state_changed) continue;
    Slot& s = slots_[e.device];
    const bool serving = s.phase == Phase::active || s.phase == Phase::spare;
    if (e.to == health::State::failed && e.warning.rule == "heartbeat" && serving) {
      // Hung: make sure it cannot come back, then treat it as lost.
      kill(s);
      fault(s, {Fault::Kind::hung, "no heartbeat for " + std::to_string(e.warning.value) + " s (hung)"},
            t_ - e.warning.value);
      continue;
    }
    if (e.to >= health::State::suspect && e.to != health::State::failed && serving) {
      act(scheduler_.on_warning(s.device, e.warning.message, t_));
      if (s.phase == Phase::spare && scheduler_.state(s.device) == scheduler::DeviceState::cordoned) {
        ledger_.idle_spares_s += t_ - s.spare_since;
        s.phase = Phase::retiring;
        send(s, protocol::Retire{"cordoned: " + e.warning.message});
      }
    } else if (e.to == health::State::healthy && s.phase == Phase::active) {
      scheduler_.on_calm(s.device, t_);
    }
  }
}

void Coordinator::maybe_migrate() {
  const bool edge = std::exchange(step_edge_, false);
  if (round_.active() || !started_) return;
  for (Slot& s : slots_) {
    if (s.phase != Phase::active || !scheduler_.pending_migration(s.device)) continue;
    const auto& warnings = monitor_.device(s.device).warnings;
    const std::string cause = "migration of device " + std::to_string(s.device) + " (rank " +
                              std::to_string(s.rank) + ") before it fails";
    if (contained_ && contained_->replicas() > 1) {
      // Contained: the suspect's replica alone stops, when it can, as the
      // live replicas finish a step: the one they begin next is what they
      // run again over the re-formed groups, and it has barely begun.
      if (!edge) continue;
      if (contained_migrates(s, warnings.empty() ? cause : cause + ": " + warnings.front().message)) return;
      continue;
    }
    // Stop every rank after a step none has begun yet; the spare takes the
    // suspect's rank from the memory tier with nothing recomputed.
    const uint64_t boundary = progress() + 1;
    for (Slot* m : members()) send(*m, protocol::StopAfter{static_cast<int64_t>(boundary)});
    act(scheduler_.at_step_boundary(boundary, t_));
    s.phase = Phase::retiring;
    round_.migration(cause, t_, boundary + 1, warnings.empty() ? json() : json(warnings.front().message));
    for (Slot* m : members()) m->reported = false;
    record(journal::encode(journal::MigrationStarted{s.device, s.rank, boundary}));
    return;
  }
}

// The step watchdog's verdict (step_watchdog.hpp) carried out: every rank
// in the same place is a stalled collective to abort and retry; otherwise
// the ranks behind the others are killed as stuck.
void Coordinator::watchdog() {
  const bool watching = started_ && (!round_.active() || round_.rejoined());
  if (!watchdog_.due(watching, progress(), t_)) return;
  std::vector<std::optional<StepPosition>> working;
  for (Slot* m : members())
    if (m->phase != Phase::done && !parked(*m)) working.push_back(m->position);
  const auto v = StepWatchdog::judge(working);
  if (v.kind == StepWatchdog::Verdict::Kind::none) return;
  const std::string step = std::to_string(v.step);
  const std::string secs = std::to_string(o_.step_timeout_s);
  if (v.kind == StepWatchdog::Verdict::Kind::every_rank_stalled) {
    record(journal::encode(journal::Stalled{
        v.step, o_.step_timeout_s,
        "every rank is in the same step; no rank stands out, aborting the collective and retrying"}));
    start_round("every rank stalled in step " + step + " for " + secs + " s", t_ - o_.step_timeout_s);
    return;
  }
  for (Slot* m : members()) {
    if (m->position != v.lowest || m->phase == Phase::done || parked(*m)) continue;
    monitor_.observe_error(m->device, Code::timeout, "collective stalled in step " + step, t_);
    kill(*m);
    fault(*m,
          {Fault::Kind::stuck_in_step,
           "stuck in a collective of step " + step + " for " + secs + " s while its peers had finished it"},
          t_ - o_.step_timeout_s);
  }
}

uint64_t Coordinator::newest_common_disk(uint32_t world) const {
  auto held = [&](uint32_t r) -> const std::set<uint64_t>* {
    auto it = disk_.find(r);
    return it == disk_.end() ? nullptr : &it->second;
  };
  if (held(0) == nullptr) return 0;
  std::set<uint64_t> common = *held(0);
  for (uint32_t r = 1; r < world; ++r) {
    const auto* h = held(r);
    std::set<uint64_t> keep;
    for (uint64_t i : common)
      if (h != nullptr && h->count(i)) keep.insert(i);
    common = std::move(keep);
  }
  return common.empty() ? 0 : *common.rbegin();
}

// A stop: every rank stops after a step none has begun (the disk
// checkpoints taken so far stay, and a rerun in the folder resumes from the
// newest); a second request, or a job that is not training, stops now.
Commands Coordinator::stop_requested(int sig, double t) {
  t_ = t;
  const auto stop = ending_.requested(sig, started_ && !round_.active(), t_);
  record(journal::encode(journal::StopRequested{ending_.signal_name()}));
  if (stop == Ending::Stop::now) {
    stop_now();
    return take();
  }
  const uint64_t boundary = progress() + 1;
  for (Slot* m : members()) send(*m, protocol::StopAfter{static_cast<int64_t>(boundary)});
  return take();
}

// Stopping: done when every rank has stopped (or finished), or the deadline
// for that has passed.
void Coordinator::finish_stop() {
  bool all = true;
  for (Slot* m : members()) all &= m->phase == Phase::done || !m->alive;
  if (ending_.stop_due(all, t_)) stop_now();
}

void Coordinator::stop_now() {
  if (finished()) return;
  end("stopped", stop_why(), job_exit::stopped_by(ending_.signal()), journal::Event::stopped);
}

std::string Coordinator::stop_why() const {
  return std::string("stopped by ") + ending_.signal_name() + " after " + std::to_string(reached()) +
         " steps; " + resume_hint("");
}

// What a rerun in this folder resumes from: the newest disk checkpoint every
// rank committed, or why there is none (none was asked for, or the disk
// tier failed).
std::string Coordinator::resume_hint(const std::string& when) const {
  const uint64_t kept = newest_common_disk(scheduler_.world_size());
  if (kept > 0)
    return "the disk checkpoint of step " + std::to_string(kept) + " is kept: rerun sigmarun in this folder" +
           (when.empty() ? "" : " " + when) + " to resume from it";
  if (storage_failures_ > 0)
    return "no disk checkpoint could be written (the disk tier failed " + std::to_string(storage_failures_) +
           " time(s), the last: " + storage_error_ + "), so a rerun starts from step 0";
  return no_disk_why() + ", so a rerun starts from step 0";
}

// Why no disk checkpoint can be restored, true to the flags given.
std::string Coordinator::no_disk_why() const {
  if (o_.checkpoint_every == 0) return "no disk checkpoints are taken (set --checkpoint-every)";
  return "no complete disk checkpoint holds every rank yet (--checkpoint-every " +
         std::to_string(o_.checkpoint_every) + ": the first is written after step " +
         std::to_string(o_.checkpoint_every) + ")";
}

void Coordinator::finish_job() {
  if (finished() || !started_ || round_.active()) return;
  // A replica that is out when the others finish is not waited for.
  for (Slot* m : members()) {
    if (m->phase != Phase::done && !parked(*m)) return;
  }
  end("done", "", job_exit::done, std::nullopt, "the job is done");
}

MetricsSnapshot Coordinator::metrics(double t) const {
  MetricsSnapshot snap;
  snap.steps = reached();
  snap.wall_s = t;
  snap.incidents = round_.incident_count();
  snap.ledger = ledger_;
  snap.spares = scheduler_.spares().size();
  for (const auto& h : monitor_.devices()) {
    snap.devices.push_back(
        {h.device, h.score, h.state, scheduler_.state(h.device),
         h.device < slots_.size() ? slots_[h.device].telemetry : std::vector<hal_telemetry_sample_t>{}});
  }
  return snap;
}

json Coordinator::report(double t) {
  t_ = t;
  round_.close();
  ledger_.slow_steps_s += step_times_.settle_all();
  const double median = step_times_.median();
  for (Slot& s : slots_) {
    if (s.phase == Phase::spare && s.spare_since >= 0) ledger_.idle_spares_s += t - s.spare_since;
    s.spare_since = -1;
  }
  ledger_.recompute_s = static_cast<double>(ledger_.recomputed_steps) * median;
  json devices = json::array();
  for (const Slot& s : slots_) {
    const auto h = monitor_.device(s.device);
    json w = json::array();
    for (const auto& x : h.warnings) w.push_back(x.signal + "/" + x.rule + ": " + x.message);
    devices.push_back({{"device", s.device},
                       {"scheduler_state", scheduler::state_name(scheduler_.state(s.device))},
                       {"health", health::state_name(h.state)},
                       {"score", h.score},
                       {"warnings", w}});
  }
  json advice;
  if (o_.failure_rate_per_device_hour > 0) {
    scheduler::FailureModel fm{o_.failure_rate_per_device_hour, o_.repair_hours, o_.job_hours, 0.01};
    const auto plan = scheduler::size_spares(world_, fm);
    advice = {{"spares", plan.spares}, {"risk", plan.risk}, {"rule", plan.rule}, {"given", o_.spares}};
  }
  json report = {{"status", ending_.status()},
                 {"reason", ending_.why()},
                 {"world", scheduler_.world_size()},
                 {"spares", o_.spares},
                 {"steps", reached()},
                 {"generations", generation_},
                 {"wall_s", t},
                 {"median_step_s", median},
                 {"incidents", round_.incidents()},
                 {"ledger", ledger_.to_json(t)},
                 {"spare_advice", advice},
                 {"storage", {{"failed_saves", storage_failures_}, {"last_error", storage_error_}}},
                 {"devices", devices}};
  // Contained recovery: which steps ran with a replica out, and each
  // replica's incident (fault, stop, hand-off, catch-up, rejoin).
  if (contained_)
    report["contained"] = {{"replica_size", replica_size_},
                           {"degraded_steps", contained_->degraded_steps()},
                           {"incidents", contained_->incidents()}};
  return report;
}

}  // namespace sigma::runtime::agent
