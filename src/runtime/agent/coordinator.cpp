// The coordinator's events: hellos, the workers' messages, exits, faults
// and readmission. The recovery round is in coordinator_round.cpp; start,
// health, migration, the watchdog, stopping and the report are in
// coordinator_tick.cpp.
#include "runtime/agent/coordinator.hpp"

#include <sigma/error.hpp>

#include <algorithm>
#include <csignal>

namespace sigma::runtime::agent {

using json = nlohmann::json;

namespace {

health::Config monitor_config(const AgentOptions& o) {
  health::Config c;
  c.heartbeat_timeout_s = o.heartbeat_timeout_s;
  c.straggler_min_steps = o.straggler_min_steps;
  return health::time_scaled(c, o.health_time_scale);
}

// Device d's node: devices 0..world-1 are every node's ranks, then every
// node's spares, so the lowest ids (which get the ranks) are spread over
// the nodes.
// A group controller per `nodes_per_group` agents (0: one for the job).
scheduler::Config scheduler_config(const AgentOptions& o) {
  scheduler::Config c;
  c.world_size = o.nproc * o.nnodes;
  c.proactive_migration = o.proactive_migration;
  c.allow_shrink = o.allow_shrink;
  c.min_world_size = o.allow_shrink ? std::max(1u, o.min_world) : c.world_size;
  for (uint32_t d = 0; d < o.nnodes * (o.nproc + o.spares); ++d)
    c.groups.push_back(o.nodes_per_group ? host_of_device(o, d) / o.nodes_per_group : 0);
  return c;
}

}  // namespace

const char* phase_name(Phase p) {
  switch (p) {
    case Phase::starting:
      return "starting";
    case Phase::spare:
      return "spare";
    case Phase::active:
      return "active";
    case Phase::retiring:
      return "retiring";
    case Phase::done:
      return "done";
    case Phase::dead:
      return "dead";
  }
  return "?";
}

Coordinator::Coordinator(const AgentOptions& o, DiskHoldings disk, double t,
                         std::optional<ContainedOptions> contained)
    : o_(o),
      world_(o.nproc * o.nnodes),
      scheduler_(scheduler_config(o)),
      monitor_(monitor_config(o)),
      t_(t),
      admission_(world_, o.nnodes * (o.nproc + o.spares), o.validate_timeout_s, o.readmit_crashed),
      watchdog_(o.step_timeout_s),
      domains_(o) {
  for (auto& [rank, steps] : disk) {
    if (rank < world_) disk_[rank] = std::move(steps);
  }
  if (contained) {
    const uint32_t size = contained->replica_size;
    if (size == 0 || world_ % size != 0)
      throw Error(Code::invalid_argument, "contained recovery: replicas of " + std::to_string(size) +
                                              " ranks do not divide a world of " + std::to_string(world_));
    if (o.allow_shrink)
      throw Error(Code::invalid_argument, "contained recovery keeps the world's size: it does not shrink");
    std::vector<uint32_t> replica_of(world_);
    for (uint32_t r = 0; r < world_; ++r) replica_of[r] = r / size;
    replica_size_ = size;
    if (contained->contain_faults)
      contained_.emplace(std::move(replica_of),
                         contained::Options{o.abort_grace_s, contained->boundary_lead,
                                            contained::Options{}.catch_up_slack, o.catch_up_s});
  }
  slots_.resize(static_cast<size_t>(o.nnodes) * (o.nproc + o.spares));
  for (uint32_t d = 0; d < slots_.size(); ++d) {
    slots_[d].device = d;
    slots_[d].node = host_of_device(o, d);
  }
}

Commands Coordinator::take() {
  Commands c;
  c.swap(out_);
  return c;
}

void Coordinator::send(const Slot& s, protocol::AgentMessage m) {
  if (!s.connected) return;
  out_.emplace_back(std::in_place_type<SendTo>);
  auto& to = std::get<SendTo>(out_.back());
  to.device = s.device;
  to.message = std::move(m);
}

void Coordinator::kill(Slot& s) {
  if (s.alive) out_.push_back(SignalWorker{s.device, SIGKILL});
}

void Coordinator::spawn(Slot& s) {
  s.phase = Phase::starting;
  s.alive = true;
  out_.push_back(SpawnWorker{s.device});
}

// The scheduler's decisions are journaled; the round keeps its pause (no
// device left for a rank) until the scheduler resumes it (a device passed
// validation and took the rank).
void Coordinator::act(const std::vector<scheduler::Action>& actions) {
  for (const auto& a : actions) {
    record(record_of(a));
    if (a.kind == scheduler::Action::Kind::pause) round_.pause(a.reason, t_);
    if (a.kind == scheduler::Action::Kind::resume) round_.resume();
  }
}

Commands Coordinator::start(double t) {
  t_ = t;
  for (Slot& s : slots_) {
    monitor_.add_device(s.device);
    act(scheduler_.add_device(s.device, t));
    if (s.node == 0) spawn(s);
  }
  return take();
}

Commands Coordinator::node_joined(uint32_t node, const std::string& rack, double t) {
  t_ = t;
  domains_.name_rack(node, rack);
  for (Slot& s : slots_) {
    if (s.node == node && !s.alive && s.phase == Phase::starting) spawn(s);
  }
  return take();
}

bool Coordinator::expects_hello(uint32_t device) const {
  return device < slots_.size() && slots_[device].phase == Phase::starting && !slots_[device].connected;
}

Commands Coordinator::hello(const protocol::Hello& h, double t) {
  t_ = t;
  if (!expects_hello(h.device)) return take();
  Slot& s = slots_[h.device];
  s.connected = true;
  record(journal::encode(journal::Validated{s.device, h.self_test_passed, h.self_test_detail}));
  act(scheduler_.validation_done(s.device, h.self_test_passed, h.self_test_detail, t));
  s.phase = h.self_test_passed ? Phase::spare : Phase::retiring;
  s.spare_since = t;
  monitor_.observe_heartbeat(s.device, t);
  return take();
}

Commands Coordinator::message(uint32_t device, const protocol::WorkerMessage& message, double t) {
  t_ = t;
  if (device >= slots_.size() || !slots_[device].connected) return take();
  Slot& s = slots_[device];
  if (const auto* m = std::get_if<protocol::Heartbeat>(&message)) {
    s.position = StepPosition{m->step, m->step_done};
    monitor_.observe_heartbeat(s.device, t);
    monitor_.observe_telemetry(s.device, t, m->telemetry.data(), m->telemetry.size());
    if (!m->telemetry.empty()) s.telemetry = m->telemetry;
    if (m->telemetry_status != HAL_OK)
      monitor_.observe_error(s.device, from_hal_status(m->telemetry_status),
                             "telemetry: " + m->telemetry_error, t);
  } else if (const auto* m = std::get_if<protocol::StepDone>(&message)) {
    s.last_step = std::max<int64_t>(s.last_step, static_cast<int64_t>(m->step));
    steps_reached_ = std::max(steps_reached_, m->step + 1);
    monitor_.observe_step(s.device, m->step, m->seconds, t);
    ledger_.slow_steps_s += step_times_.finished(m->step, m->seconds);
    ledger_.steps_run += s.rank == 0 ? 1 : 0;
    contained_step(s, m->step);
  } else if (const auto* m = std::get_if<protocol::Checkpointed>(&message)) {
    if (s.rank >= 0) disk_[static_cast<uint32_t>(s.rank)].insert(m->index);
  } else if (const auto* m = std::get_if<protocol::Joined>(&message)) {
    s.joined_gen = m->generation;
    s.newcomer = false;
    s.comm_s = m->comm_s;
    s.restore_s = m->restore_s;
    s.last_step = static_cast<int64_t>(m->index) - 1;
  } else if (const auto* m = std::get_if<protocol::Reformed>(&message)) {
    s.epoch = std::max(s.epoch, m->epoch);
    reformed_check();
  } else if (const auto* m = std::get_if<protocol::RecoverRequest>(&message)) {
    recover_request(s, *m);
  } else if (const auto* m = std::get_if<protocol::Refused>(&message)) {
    if (!finished())
      end("unrecoverable", "rank " + std::to_string(s.rank) + " refused the job: " + m->reason,
          job_exit::unrecoverable, journal::Event::unrecoverable);
  } else if (const auto* m = std::get_if<protocol::StorageFailed>(&message)) {
    ++storage_failures_;
    storage_error_ = m->reason;
    record(journal::encode(journal::StorageFailed{s.device, s.rank, m->index, m->reason}));
  } else if (const auto* m = std::get_if<protocol::Done>(&message)) {
    // Sent before our abort reached it: its session answers the abort with
    // a report, and it stays in the round.
    if (!s.abort_sent) s.phase = Phase::done;
    s.last_step = static_cast<int64_t>(m->steps) - 1;
    steps_reached_ = std::max(steps_reached_, m->steps);
  }
  // Snapshotted: the memory tier's holdings are reported with a recovery
  // request, when they matter; a hello after the greeting is ignored.
  return take();
}

void Coordinator::recover_request(Slot& s, const protocol::RecoverRequest& m) {
  if (ending_.stopping() && s.phase == Phase::active) {
    // Stopped at the boundary the agent asked for: this rank is through.
    s.phase = Phase::done;
    send(s, protocol::Goodbye{"the job is stopping: " + stop_why()});
    return;
  }
  s.reported = true;
  s.abort_sent = false;
  s.own = std::set<uint64_t>(m.own.begin(), m.own.end());
  s.replicas.clear();
  if (m.replicas_of) {
    for (const auto& [of, steps] : *m.replicas_of)
      s.replicas[of] = std::set<uint64_t>(steps.begin(), steps.end());
  } else if (s.rank >= 0 && !m.replica.empty()) {
    // An older worker: its replicas are its ring predecessor's.
    const uint32_t world = scheduler_.world_size(), r = static_cast<uint32_t>(s.rank);
    s.replicas[(r + world - 1) % world] = std::set<uint64_t>(m.replica.begin(), m.replica.end());
  }
  // What it holds on disk, as it knows it now (a rollback discards newer
  // checkpoints): replaces what its Checkpointed messages said.
  if (s.rank >= 0) disk_[static_cast<uint32_t>(s.rank)] = std::set<uint64_t>(m.disk.begin(), m.disk.end());
  if (m.code == Code::device_lost && (s.phase == Phase::active || s.phase == Phase::spare)) {
    // Its own device is gone: no use waiting for it in the next generation.
    kill(s);
    fault(s, {Fault::Kind::device_lost, "the device reports itself lost: " + m.reason}, t_);
    return;
  }
  if (s.phase != Phase::active) return;
  if (parked(s) && !round_.active() &&
      contained_->stage(static_cast<uint32_t>(s.rank) / replica_size_) != contained::Stage::handing) {
    // Its replica was stopped: it has left its collectives and waits for
    // the hand-off.
    apply(contained_->rank_out(static_cast<uint32_t>(s.rank), t_));
    return;
  }
  const std::string said =
      "rank " + std::to_string(s.rank) + " reported: " + (m.reason.empty() ? "an error" : m.reason);
  if (contained_reported(s, said)) return;
  // Every rank has joined the generation in force (rejoined, recomputing up
  // to the reached step): a report is a fault of that generation, and the
  // next round's -- often a survivor's failed collective before the faulty
  // rank's own word.
  if (!round_.active() || round_.rejoined()) {
    start_round(said, t_, true);
  } else if (round_.assigned() && !round_.rejoined() && s.joined_gen != generation_) {
    // It could not carry out the assignment (its communicator, probe or
    // restore failed): the round starts over, a bounded number of times.
    fail_assignment("rank " + std::to_string(s.rank) + " could not join generation " +
                    std::to_string(generation_) + ": " + m.reason);
  }
  s.reported = true;  // its report stands for the next assignment
}

Commands Coordinator::exited(uint32_t device, const protocol::ProcessEnd& end, double t) {
  t_ = t;
  if (device >= slots_.size()) return take();
  Slot& s = slots_[device];
  s.alive = false;
  s.connected = false;
  if (s.phase == Phase::dead) {
    if (!s.readmit_cause.empty() && !finished()) readmit(s);  // killed by the agent, now gone: validate again
    return take();
  }
  if (s.phase == Phase::done && !finished()) {
    // It finished its steps and left before the goodbye: expected, unless a
    // peer fails in its last steps (then start_round replaces it).
    return take();
  }
  if (s.phase == Phase::done || s.phase == Phase::retiring || finished()) {
    // An expected exit: the job ended, or the worker was let go.
    if (s.phase == Phase::spare && s.spare_since >= 0) ledger_.idle_spares_s += t - s.spare_since;
    s.phase = Phase::dead;
    return take();
  }
  if (s.phase == Phase::starting && end.exited_cleanly()) {
    // A program without the session that ran to its end: not a fault.
    s.phase = Phase::dead;
    s.plain_done = true;
    record(journal::encode(
        journal::ProcessExit{journal::Event::exited_without_session, s.device, end.describe()}));
    return take();
  }
  const auto kind =
      end.how == protocol::ProcessEnd::How::lost ? Fault::Kind::node_lost : Fault::Kind::process_ended;
  fault(s, {kind, "process " + end.describe()}, t);
  return take();
}

void Coordinator::fault(Slot& s, const Fault& f, double fault_s) {
  const std::string& cause = f.words;
  const Phase was = s.phase;
  if (was == Phase::spare && s.spare_since >= 0) ledger_.idle_spares_s += t_ - s.spare_since;
  s.phase = Phase::dead;
  if (s.connected) out_.push_back(Disconnect{s.device});
  s.connected = false;
  // The health record says which kind of loss: the device itself, or the
  // process on it (crashed, hung, stuck).
  monitor_.observe_error(s.device, f.device_said() ? Code::device_lost : Code::internal, cause, t_);
  record(journal::encode(journal::Fault{s.device, s.rank, phase_name(was), cause, t_ - fault_s}));
  if (was == Phase::retiring && round_.waiting_for_reports()) {
    // The device being migrated away died before the boundary: the others
    // may be waiting for it inside a collective.
    for (Slot* m : members()) {
      if (m->phase == Phase::active) send(*m, protocol::Abort{cause});
    }
  }
  if (was == Phase::retiring || was == Phase::done || finished()) return;
  if (was == Phase::spare || was == Phase::starting) {
    if (scheduler_.state(s.device) != scheduler::DeviceState::cordoned)
      act(scheduler_.on_fault(s.device, cause, true, t_));
    return;
  }
  const uint32_t world = scheduler_.world_size();
  const uint32_t rank = static_cast<uint32_t>(s.rank);
  bool holder_alive = false;
  if (world > 1) {
    Slot* h = slot_of_rank((rank + 1) % world);
    holder_alive = h && (h->phase == Phase::active || h->phase == Phase::done);
  }
  const std::string words =
      "device " + std::to_string(s.device) + " (rank " + std::to_string(rank) + "): " + cause;
  if (contained_takes(s, f, words)) return maybe_readmit(s, f);
  start_round(words, fault_s);
  act(scheduler_.on_fault(s.device, cause, holder_alive, t_));
  maybe_readmit(s, f);
}

void Coordinator::maybe_readmit(Slot& s, const Fault& f) {
  if (!admission_.may_readmit(s.device, f.process_went(),
                              scheduler_.state(s.device) == scheduler::DeviceState::cordoned))
    return;
  s.readmit_cause = f.words;
  if (!s.alive) readmit(s);  // else once its exit is reaped (exited())
}

void Coordinator::readmit(Slot& s) {
  const std::string cause = std::move(s.readmit_cause);
  s.readmit_cause.clear();
  if (scheduler_.state(s.device) != scheduler::DeviceState::cordoned) return;  // decided otherwise meanwhile
  const uint32_t time = admission_.readmit(s.device);
  monitor_.reset(s.device);
  record(journal::encode(journal::Readmit{s.device, cause, time, admission_.budget()}));
  act(scheduler_.on_repaired(s.device, t_));  // cordoned -> validating
  spawn(s);                                   // a fresh worker self-tests the device
}

void Coordinator::end(const std::string& status, const std::string& why, int code,
                      std::optional<journal::Event> event, const std::string& goodbye) {
  ending_.end(status, why, code, t_);
  if (event) record(journal::encode(journal::JobEnded{*event, why}));
  for (Slot& s : slots_) send(s, protocol::Goodbye{goodbye.empty() ? why : goodbye});
}

uint64_t Coordinator::reached() const { return std::max(progress(), steps_reached_); }

uint64_t Coordinator::progress() const {
  int64_t best = 0;
  for (const Slot& s : slots_) {
    if (s.rank >= 0 && (s.phase == Phase::active || s.phase == Phase::done))
      best = std::max(best, s.last_step + 1);
  }
  return static_cast<uint64_t>(best);
}

Coordinator::Slot* Coordinator::slot_of_rank(uint32_t rank) {
  auto d = scheduler_.device_of(rank);
  return d ? &slots_[*d] : nullptr;
}

std::vector<Coordinator::Slot*> Coordinator::members() {
  std::vector<Slot*> out;
  for (uint32_t r = 0; r < scheduler_.world_size(); ++r) {
    if (Slot* s = slot_of_rank(r)) out.push_back(s);
  }
  return out;
}

}  // namespace sigma::runtime::agent
