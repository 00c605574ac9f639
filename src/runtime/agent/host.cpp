// sigmarun's agent loop. One thread owns every piece of job state: it polls
// the workers' channels, the listening socket and a self-pipe woken by
// SIGCHLD, so a crash is seen the moment the process is reaped, and runs the
// health monitor and the scheduler on the same clock. Recovery is a round:
// abort the survivors, collect what each holds, pick the freshest state all
// can reach (memory first, disk second), assign the next generation, and
// watch the job get back to the step it had reached.
#include "agent.hpp"

#include "journal.hpp"
#include "metrics.hpp"
#include "node.hpp"
#include "runtime/agent/restore_plan.hpp"
#include "runtime/channel.hpp"
#include "runtime/protocol.hpp"

#include <sigma/bootstrap.hpp>
#include <sigma/checkpoint.hpp>
#include <sigma/error.hpp>

#include <fcntl.h>
#include <poll.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>
#include <algorithm>
#include <cerrno>
#include <cmath>
#include <csignal>
#include <cstring>
#include <deque>
#include <filesystem>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <set>

extern char** environ;

namespace sigma::sigmarun {

using json = nlohmann::json;
using runtime::Channel;
namespace protocol = runtime::protocol;
namespace fs = std::filesystem;

namespace {

enum class Phase { starting, spare, active, retiring, done, dead };

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

struct Slot {
  uint32_t device = 0;
  uint32_t node = 0;   // the agent whose host runs it
  pid_t pid = -1;      // on that host
  bool alive = false;  // a process exists (or is being started) for it
  std::unique_ptr<Channel> ch;
  Phase phase = Phase::starting;
  int64_t rank = -1;
  double spare_since = -1;
  double last_heartbeat = -1;
  int64_t last_step = -1;
  int64_t current_step = -1;  // from heartbeats: the step in progress
  bool reported = false;
  bool plain_done = false;  // exited 0 without ever greeting: a plain program that finished
  std::set<uint64_t> own, replica;
  uint64_t joined_gen = 0;
  double comm_s = 0, restore_s = 0;
};

struct Round {
  bool active = false;
  std::string cause;
  double fault_s = 0, detected_s = 0, abort_s = 0;
  uint64_t reached = 0;
  bool paused = false;
  std::string pause_reason;
  bool assigned = false;
  double assigned_s = 0;
  uint64_t index = 0;
  std::string tier;
  bool rejoined = false;
  double rejoined_s = 0;
  uint32_t failed_assignments = 0;  // assignments a rank could not carry out
  json record;
};

// Assignments that may fail (a rank cannot build the communicator or restore)
// before the job pauses with the reason instead of trying for ever.
constexpr uint32_t kMaxFailedAssignments = 3;

class Agent {
 public:
  explicit Agent(const Options& o)
      : o_(o),
        world_(o.nproc * o.nnodes),
        scheduler_({o.nproc * o.nnodes, o.proactive_migration, o.allow_shrink,
                    o.allow_shrink ? std::max(1u, o.min_world) : o.nproc * o.nnodes}),
        monitor_(monitor_config(o)),
        t0_(health::monotonic_s()) {}

  int run();

 private:
  static health::Config monitor_config(const Options& o) {
    health::Config c;
    c.heartbeat_timeout_s = o.heartbeat_timeout_s;
    return health::time_scaled(c, o.health_time_scale);
  }

  double now() const { return health::monotonic_s() - t0_; }
  void spawn(Slot& s);
  void signal_slot(Slot& s, int sig);
  void exited(Slot& s, const std::string& how);
  void node_messages(uint32_t node);
  std::vector<std::unique_ptr<Channel>> nodes_;  // [node] -> its agent (1..nnodes-1)
  int tcp_fd_ = -1;
  std::string tcp_addr_;
  void accept_new();
  void greeted(std::unique_ptr<Channel> ch, const json& first);
  void read_messages(Slot& s);
  void handle(Slot& s, const protocol::WorkerMessage& m);
  void reap();
  void fault(Slot& s, const std::string& cause, double fault_s);
  void start_round(const std::string& cause, double fault_s);
  void advance_round();
  std::optional<runtime::recovery::RestorePlan> plan_restore();
  void health_tick();
  void maybe_migrate();
  void watchdog();
  uint64_t find_disk_checkpoints();
  void begin_stop(int sig);
  void finish_stop();
  void stop_now();
  std::string stop_why();
  std::string resume_hint(const std::string& when);
  int stop_signal_ = 0;            // SIGTERM / SIGINT received: the job is stopping
  uint64_t storage_failures_ = 0;  // disk checkpoints that could not be written
  std::string storage_error_;      // the last one's reason
  double stop_deadline_ = -1;
  // The newest disk checkpoint ranks 0..world-1 all committed; 0 if none.
  uint64_t newest_common_disk(uint32_t world);
  uint64_t watched_progress_ = 0;
  double progress_since_ = 0;
  void finish_job();
  void end_all(const std::string& why);
  void write_report(const std::string& status, const std::string& why);
  void progress_tick();
  void publish_metrics();
  // The most steps any rank has ever completed / the members' progress now
  // (after a rollback the second is behind the first until recomputed).
  uint64_t reached() const;
  uint64_t progress() const;
  uint64_t steps_reached_ = 0;
  Slot* slot_of_rank(uint32_t rank);
  std::vector<Slot*> members();

  Options o_;
  uint32_t world_;
  scheduler::Scheduler scheduler_;
  health::Monitor monitor_;
  double t0_;
  std::vector<Slot> slots_;
  int listen_fd_ = -1;
  std::vector<std::unique_ptr<Channel>> pending_;  // connected, not yet said hello
  std::unique_ptr<Journal> journal_;
  std::unique_ptr<MetricsServer> metrics_;
  bool started_ = false;
  uint64_t generation_ = 0;
  Round round_;
  std::vector<json> incidents_;
  Ledger ledger_;
  // Step times in bounded memory: the last few steps by index (slowest rank
  // wins), then a window of finished ones for the median; slow steps are
  // charged to the ledger as they leave the first map.
  std::map<uint64_t, double> step_times_;
  std::deque<double> step_window_;
  void settle_steps(size_t keep);
  double median_step() const;
  double last_progress_ = 0;
  bool finished_ = false;
  double finished_at_ = -1;  // when the last workers were told to go
  int exit_code_ = 0;
  std::string end_status_ = "done", end_why_;
  std::map<uint32_t, std::set<uint64_t>> disk_;  // rank -> committed disk indices
  std::string store_uri_;
};

void Agent::spawn(Slot& s) {
  // Devices 0..world-1 are every node's ranks, then every node's spares, so
  // the lowest ids (which get the ranks) are spread over the nodes.
  EnvList env;
  env.emplace_back("SIGMA_AGENT_SOCKET", s.node == 0 ? o_.job_dir + "/agent.sock" : tcp_addr_);
  env.emplace_back("SIGMA_DEVICE", std::to_string(s.device));
  env.emplace_back("SIGMA_STORE", store_uri_);
  env.emplace_back("SIGMA_HEARTBEAT_S", std::to_string(o_.heartbeat_s));
  env.emplace_back("SIGMA_SNAPSHOT_EVERY", std::to_string(o_.snapshot_every));
  env.emplace_back("SIGMA_CHECKPOINT_EVERY", std::to_string(o_.checkpoint_every));
  // A plain program (no session) still learns its place, torchrun-style.
  if (s.device < world_) {
    env.emplace_back("SIGMA_RANK", std::to_string(s.device));
    env.emplace_back("SIGMA_WORLD_SIZE", std::to_string(world_));
  }
  s.phase = Phase::starting;
  s.alive = true;
  if (s.node == 0) {
    s.pid = spawn_worker(o_, s.device, env);
    journal_->write({{"event", "launch"}, {"device", s.device}, {"node", 0}, {"pid", s.pid}});
    return;
  }
  nodes_[s.node]->send(protocol::encode(protocol::Spawn{s.device, env}));
}

void Agent::signal_slot(Slot& s, int sig) {
  if (!s.alive || s.pid <= 0) return;
  if (s.node == 0)
    ::kill(s.pid, sig);
  else if (nodes_[s.node])
    nodes_[s.node]->send(protocol::encode(protocol::Kill{s.device, sig}));
}

void Agent::exited(Slot& s, const std::string& how) {
  s.alive = false;
  s.pid = -1;
  if (s.phase == Phase::dead) return;
  if (s.phase == Phase::done || s.phase == Phase::retiring || finished_) {
    // An expected exit: the job ended, or the worker was let go.
    if (s.phase == Phase::spare && s.spare_since >= 0) ledger_.idle_spares_s += now() - s.spare_since;
    s.phase = Phase::dead;
    return;
  }
  if (s.phase == Phase::starting && !s.ch && how == describe_status(0)) {
    // A program without the session that ran to its end: not a fault.
    s.phase = Phase::dead;
    s.plain_done = true;
    journal_->write({{"event", "exited_without_session"}, {"device", s.device}, {"status", how}});
    return;
  }
  // Whatever it had sent before it died still counts.
  if (s.ch) read_messages(s);
  fault(s, "process " + how, now());
}

void Agent::node_messages(uint32_t n) {
  auto& ch = nodes_[n];
  while (ch) {
    auto m = ch->receive_ready();
    if (!m) break;
    try {
      const protocol::NodeMessage msg = protocol::decode_node(*m);
      if (const auto* l = std::get_if<protocol::Launched>(&msg)) {
        if (l->device >= slots_.size() || slots_[l->device].node != n) continue;
        slots_[l->device].pid = static_cast<pid_t>(l->pid);
        journal_->write({{"event", "launch"}, {"device", l->device}, {"node", n}, {"pid", l->pid}});
      } else if (const auto* x = std::get_if<protocol::Exited>(&msg)) {
        if (x->device >= slots_.size() || slots_[x->device].node != n) continue;
        exited(slots_[x->device], x->status);
      }
    } catch (const Error& e) {
      journal_->write({{"event", "bad_message"}, {"node", n}, {"error", e.what()}, {"message", *m}});
    }
  }
  if (ch && ch->closed()) {
    ch.reset();
    journal_->write({{"event", "node_lost"}, {"node", n}});
    for (Slot& s : slots_) {
      if (s.node == n && s.alive) exited(s, "lost with its node agent " + std::to_string(n));
    }
  }
}

// The first message on a new connection: a worker's hello (its device and
// admission verdict) or another host's agent. Anything else, a malformed
// greeting, a peer of another protocol version or a device that is not
// expected is refused, journalled with the reason.
void Agent::greeted(std::unique_ptr<Channel> ch, const json& first) {
  auto refuse = [&](const std::string& why) {
    journal_->write({{"event", "refused_connection"}, {"reason", why}, {"message", first}});
    ch->send(protocol::encode(protocol::Goodbye{"refused: " + why}));
  };
  protocol::Greeting g;
  try {
    g = protocol::decode_greeting(first);
  } catch (const Error& e) {
    return refuse(e.what());
  }
  const uint32_t version = std::visit([](const auto& x) { return x.version; }, g);
  if (auto why = protocol::refusal(version)) return refuse(*why);
  if (const auto* node = std::get_if<protocol::NodeHello>(&g)) {
    // Another host's agent: it starts that node's workers for us.
    const uint32_t n = node->node;
    if (n == 0 || n >= o_.nnodes || nodes_[n] || finished_)
      return refuse("node " + std::to_string(n) + " is not one this job waits for");
    nodes_[n] = std::move(ch);
    journal_->write({{"event", "node_joined"}, {"node", n}});
    for (Slot& s : slots_) {
      if (s.node == n && !s.alive && s.phase == Phase::starting) spawn(s);
    }
    return;
  }
  const auto& hello = std::get<protocol::Hello>(g);
  const uint32_t d = hello.device;
  if (d >= slots_.size() || slots_[d].phase != Phase::starting)
    return refuse("device " + std::to_string(d) + " is not one this agent is starting");
  Slot& s = slots_[d];
  s.ch = std::move(ch);
  const bool passed = hello.self_test_passed;
  const std::string& detail = hello.self_test_detail;
  journal_->write({{"event", "validated"}, {"device", d}, {"passed", passed}, {"detail", detail}});
  for (const auto& a : scheduler_.validation_done(d, passed, detail, now())) journal_->action(a);
  s.phase = passed ? Phase::spare : Phase::retiring;
  s.spare_since = now();
  s.last_heartbeat = now();
  monitor_.observe_heartbeat(d, now());
}

void Agent::accept_new() {
  for (int lfd : {listen_fd_, tcp_fd_}) {
    if (lfd < 0) continue;
    for (;;) {
      const int fd = ::accept4(lfd, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
      if (fd < 0) break;
      pending_.push_back(std::make_unique<Channel>(fd));
    }
  }
}

uint64_t Agent::reached() const {
  int64_t best = 0;
  for (const Slot& s : slots_) {
    if (s.rank >= 0 && (s.phase == Phase::active || s.phase == Phase::done))
      best = std::max(best, s.last_step + 1);
  }
  return std::max(static_cast<uint64_t>(best), steps_reached_);
}

uint64_t Agent::progress() const {
  int64_t best = 0;
  for (const Slot& s : slots_) {
    if (s.rank >= 0 && (s.phase == Phase::active || s.phase == Phase::done))
      best = std::max(best, s.last_step + 1);
  }
  return static_cast<uint64_t>(best);
}

Slot* Agent::slot_of_rank(uint32_t rank) {
  auto d = scheduler_.device_of(rank);
  return d ? &slots_[*d] : nullptr;
}

std::vector<Slot*> Agent::members() {
  std::vector<Slot*> out;
  for (uint32_t r = 0; r < scheduler_.world_size(); ++r) {
    if (Slot* s = slot_of_rank(r)) out.push_back(s);
  }
  return out;
}

void Agent::handle(Slot& s, const protocol::WorkerMessage& message) {
  const double t = now();
  if (const auto* m = std::get_if<protocol::Heartbeat>(&message)) {
    s.last_heartbeat = t;
    // Progress as 2 x step + 1 once the step's own work is done (in
    // step_end): a rank stuck inside a step's collective is behind its peers.
    s.current_step = 2 * m->step + (m->step_done ? 1 : 0);
    monitor_.observe_heartbeat(s.device, t);
    monitor_.observe_telemetry(s.device, t, m->telemetry.data(), m->telemetry.size());
    if (m->telemetry_status != HAL_OK)
      monitor_.observe_error(s.device, from_hal_status(m->telemetry_status),
                             "telemetry: " + m->telemetry_error, t);
  } else if (const auto* m = std::get_if<protocol::StepDone>(&message)) {
    s.last_step = std::max<int64_t>(s.last_step, static_cast<int64_t>(m->step));
    steps_reached_ = std::max(steps_reached_, m->step + 1);
    monitor_.observe_step(s.device, m->step, m->seconds, t);
    double& slowest = step_times_[m->step];
    slowest = std::max(slowest, m->seconds);
    settle_steps(64);
    ledger_.steps_run += s.rank == 0 ? 1 : 0;
  } else if (const auto* m = std::get_if<protocol::Checkpointed>(&message)) {
    if (s.rank >= 0) disk_[static_cast<uint32_t>(s.rank)].insert(m->index);
  } else if (const auto* m = std::get_if<protocol::Joined>(&message)) {
    s.joined_gen = m->generation;
    s.comm_s = m->comm_s;
    s.restore_s = m->restore_s;
    s.last_step = static_cast<int64_t>(m->index) - 1;
  } else if (const auto* m = std::get_if<protocol::RecoverRequest>(&message)) {
    if (stop_signal_ != 0 && s.phase == Phase::active) {
      // Stopped at the boundary the agent asked for: this rank is through.
      s.phase = Phase::done;
      s.ch->send(protocol::encode(protocol::Goodbye{"the job is stopping: " + stop_why()}));
      return;
    }
    s.reported = true;
    s.own = std::set<uint64_t>(m->own.begin(), m->own.end());
    s.replica = std::set<uint64_t>(m->replica.begin(), m->replica.end());
    // A C worker passes its last error's text, whose code is only named
    // inside it ("... HAL_ERR_DEVICE_LOST ...").
    const bool lost = m->code == "device_lost" ||
                      (m->code == "unknown" && m->reason.find("HAL_ERR_DEVICE_LOST") != std::string::npos);
    if (lost && (s.phase == Phase::active || s.phase == Phase::spare)) {
      // Its own device is gone: no use waiting for it in the next generation.
      signal_slot(s, SIGKILL);
      fault(s, "the device reports itself lost: " + m->reason, t);
      return;
    }
    if (s.phase != Phase::active) return;
    if (!round_.active) {
      start_round(
          "rank " + std::to_string(s.rank) + " reported: " + (m->reason.empty() ? "an error" : m->reason), t);
    } else if (round_.assigned && !round_.rejoined && s.joined_gen != generation_) {
      // It could not carry out the assignment (its communicator, probe or
      // restore failed): the round starts over, a bounded number of times.
      const std::string why = "rank " + std::to_string(s.rank) + " could not join generation " +
                              std::to_string(generation_) + ": " + m->reason;
      if (++round_.failed_assignments >= kMaxFailedAssignments) {
        round_.paused = true;
        round_.pause_reason =
            "recovery failed " + std::to_string(round_.failed_assignments) + " times; the last: " + why;
      }
      start_round(why, round_.fault_s);
    }
    s.reported = true;  // its report stands for the next assignment
  } else if (const auto* m = std::get_if<protocol::StorageFailed>(&message)) {
    ++storage_failures_;
    storage_error_ = m->reason;
    journal_->write({{"event", "storage_failed"},
                     {"device", s.device},
                     {"rank", s.rank},
                     {"index", m->index},
                     {"reason", m->reason}});
  } else if (const auto* m = std::get_if<protocol::Done>(&message)) {
    s.phase = Phase::done;
    s.last_step = static_cast<int64_t>(m->steps) - 1;
    steps_reached_ = std::max(steps_reached_, m->steps);
  }
  // Snapshotted: the memory tier's holdings are reported with a recovery
  // request, when they matter; a hello after the greeting is ignored.
}

void Agent::read_messages(Slot& s) {
  while (s.ch) {
    auto m = s.ch->receive_ready();
    if (!m) break;
    try {
      handle(s, protocol::decode_worker(*m));
    } catch (const Error& e) {
      // A worker's malformed message must not take the job down with it.
      journal_->write({{"event", "bad_message"}, {"device", s.device}, {"error", e.what()}, {"message", *m}});
    }
  }
}

void Agent::start_round(const std::string& cause, double fault_s) {
  const double t = now();
  bool reset_reports = true;
  if (round_.active && !round_.rejoined) {
    // A second fault before the first recovery finished: the same round goes
    // on with one more casualty. Survivors already waiting keep their
    // reports; after an assignment went out they must report again.
    // A survivor's report often arrives before the exit is reaped: the
    // fault itself is the better headline.
    if (round_.cause.rfind("rank ", 0) == 0 && round_.cause.find(" reported: ") != std::string::npos) {
      round_.cause = cause + " (first seen as: " + round_.cause + ")";
    } else {
      round_.cause += "; then " + cause;
    }
    round_.record["cause"] = round_.cause;
    // Reports are never reset here: one made after the assignment went out
    // (a survivor whose new communicator failed with the spare) is the
    // report of what it holds now, and it will not send another: resetting
    // it had the agent kill a healthy rank for waiting.
    reset_reports = false;
    round_.assigned = false;
  } else {
    if (round_.active) {
      round_.record["back_at_reached_step_s"] = nullptr;
      incidents_.push_back(round_.record);
    }
    round_ = Round{};
    round_.active = true;
    round_.cause = cause;
    round_.fault_s = fault_s;
    round_.detected_s = t;
    round_.reached = reached();
    round_.record = {
        {"cause", cause}, {"fault_s", fault_s}, {"detected_s", t}, {"reached_step", round_.reached}};
  }
  round_.abort_s = t;
  for (Slot* m : members()) {
    if (m->phase == Phase::active) {
      if (reset_reports) m->reported = false;
      if (m->ch) m->ch->send(protocol::encode(protocol::Abort{cause}));
    }
  }
  for (Slot& s : slots_) {
    if (s.phase == Phase::retiring && s.ch) s.ch->send(protocol::encode(protocol::Abort{cause}));
  }
  journal_->write({{"event", "recovery_started"}, {"cause", cause}, {"reached_step", round_.reached}});
}

void Agent::fault(Slot& s, const std::string& cause, double fault_s) {
  const double t = now();
  const Phase was = s.phase;
  if (was == Phase::spare && s.spare_since >= 0) ledger_.idle_spares_s += t - s.spare_since;
  s.phase = Phase::dead;
  s.ch.reset();
  // The health record says which kind of loss: the device itself, or the
  // process on it (crashed, hung, stuck).
  const bool device_said = cause.find("lost") != std::string::npos;
  monitor_.observe_error(s.device, device_said ? Code::device_lost : Code::internal, cause, t);
  journal_->write({{"event", "fault"},
                   {"device", s.device},
                   {"rank", s.rank},
                   {"phase", phase_name(was)},
                   {"cause", cause},
                   {"detected_after_s", t - fault_s}});
  if (was == Phase::retiring && round_.active && !round_.assigned) {
    // The device being migrated away died before the boundary: the others
    // may be waiting for it inside a collective.
    for (Slot* m : members()) {
      if (m->phase == Phase::active && m->ch) m->ch->send(protocol::encode(protocol::Abort{cause}));
    }
  }
  if (was == Phase::retiring || was == Phase::done || finished_) return;
  if (was == Phase::spare || was == Phase::starting) {
    if (scheduler_.state(s.device) != scheduler::DeviceState::cordoned) {
      for (const auto& a : scheduler_.on_fault(s.device, cause, true, t)) journal_->action(a);
    }
    return;
  }
  const uint32_t world = scheduler_.world_size();
  const uint32_t rank = static_cast<uint32_t>(s.rank);
  bool holder_alive = false;
  if (world > 1) {
    Slot* h = slot_of_rank((rank + 1) % world);
    holder_alive = h && h->phase == Phase::active;
  }
  start_round("device " + std::to_string(s.device) + " (rank " + std::to_string(rank) + "): " + cause,
              fault_s);
  for (const auto& a : scheduler_.on_fault(s.device, cause, holder_alive, t)) {
    journal_->action(a);
    if (a.kind == scheduler::Action::Kind::pause) {
      round_.paused = true;
      round_.pause_reason = a.reason;
    }
  }
}

void Agent::reap() {
  for (;;) {
    int status = 0;
    const pid_t pid = ::waitpid(-1, &status, WNOHANG);
    if (pid <= 0) return;
    for (Slot& s : slots_) {
      if (s.node == 0 && s.pid == pid) {
        exited(s, describe_status(status));
        break;
      }
    }
  }
}

std::optional<runtime::recovery::RestorePlan> Agent::plan_restore() {
  std::vector<runtime::recovery::RankHoldings> ranks(scheduler_.world_size());
  for (uint32_t r = 0; r < ranks.size(); ++r) {
    const Slot* s = slot_of_rank(r);
    if (s == nullptr) return std::nullopt;
    ranks[r].survived = s->phase == Phase::active;
    if (ranks[r].survived) {
      ranks[r].own = s->own;
      ranks[r].replica = s->replica;
    }
    if (auto d = disk_.find(r); d != disk_.end()) ranks[r].disk = d->second;
  }
  return runtime::recovery::plan_restore(ranks, reached());
}

void Agent::advance_round() {
  if (!round_.active) return;
  const double t = now();
  if (!round_.assigned) {
    auto ms = members();
    for (Slot* m : ms) {
      if (m->phase == Phase::active && !m->reported && t - round_.abort_s > o_.abort_grace_s) {
        // A survivor that cannot leave its collective is as good as hung.
        signal_slot(*m, SIGKILL);
        fault(*m, "did not answer the abort within " + std::to_string(o_.abort_grace_s) + " s", t);
        return;
      }
    }
    for (Slot* m : ms) {
      if (m->phase == Phase::active && !m->reported) return;
      if (m->phase == Phase::starting) return;
    }
    if (round_.paused) {
      end_status_ = "paused";
      end_why_ = round_.pause_reason + "; " + resume_hint("when a device is repaired");
      exit_code_ = 3;
      journal_->write({{"event", "paused"}, {"reason", end_why_}});
      end_all(end_why_);
      return;
    }
    const auto plan = plan_restore();
    if (!plan) {
      end_status_ = "unrecoverable";
      end_why_ =
          "no state to restore: the memory replicas of the lost ranks died with them and no disk "
          "checkpoint is common to every rank (set --checkpoint-every)";
      exit_code_ = 4;
      journal_->write({{"event", "unrecoverable"}, {"reason", end_why_}});
      end_all(end_why_);
      return;
    }
    const uint64_t index = plan->index;
    const std::string& tier = plan->tier;
    const auto& pairs = plan->handoff;
    ++generation_;
    json handoff = json::array();
    for (auto [h, r] : pairs) handoff.push_back({h, r});
    for (uint32_t r = 0; r < scheduler_.world_size(); ++r) {
      Slot* s = slot_of_rank(r);
      if (s->phase == Phase::spare) {
        ledger_.idle_spares_s += t - s->spare_since;
        s->phase = Phase::active;
      }
      s->rank = r;
      s->reported = false;
      s->ch->send(
          protocol::encode(protocol::Assign{r, scheduler_.world_size(), generation_, tier, index, pairs}));
    }
    for (Slot& s : slots_) {
      if (s.phase == Phase::retiring && s.ch)
        s.ch->send(protocol::encode(protocol::Retire{"moved off a suspect device"}));
    }
    round_.assigned = true;
    round_.assigned_s = t;
    round_.index = index;
    round_.tier = tier;
    journal_->write({{"event", "assigned"},
                     {"generation", generation_},
                     {"restore", tier},
                     {"index", index},
                     {"handoff", handoff}});
    return;
  }
  if (!round_.rejoined) {
    double comm_s = 0, restore_s = 0;
    for (Slot* m : members()) {
      if (m->joined_gen != generation_) return;
      comm_s = std::max(comm_s, m->comm_s);
      restore_s = std::max(restore_s, m->restore_s);
    }
    round_.rejoined = true;
    round_.rejoined_s = t;
    const uint64_t redo = round_.reached > round_.index ? round_.reached - round_.index : 0;
    ledger_.detection_s += round_.detected_s - round_.fault_s;
    ledger_.restart_s += std::max(0.0, t - round_.detected_s - restore_s);
    ledger_.restore_s += restore_s;
    ledger_.recomputed_steps += redo;
    round_.record.update({{"generation", generation_},
                          {"restore", round_.tier},
                          {"index", round_.index},
                          {"recomputed_steps", redo},
                          {"rejoined_s", t},
                          {"comm_s", comm_s},
                          {"restore_s", restore_s}});
    journal_->write({{"event", "rejoined"},
                     {"generation", generation_},
                     {"after_fault_s", t - round_.fault_s},
                     {"recomputed_steps", redo}});
  }
  if (progress() >= round_.reached) {
    round_.record["back_at_reached_step_s"] = t - round_.fault_s;
    journal_->write(
        {{"event", "recovered"}, {"back_at_step", round_.reached}, {"after_fault_s", t - round_.fault_s}});
    incidents_.push_back(round_.record);
    round_.active = false;
  }
}

void Agent::health_tick() {
  const double t = now();
  for (const health::Event& e : monitor_.evaluate(t)) {
    journal_->health(e);
    if (e.kind != health::Event::Kind::state_changed) continue;
    Slot& s = slots_[e.device];
    if (e.to == health::State::failed && e.warning.rule == "heartbeat" &&
        (s.phase == Phase::active || s.phase == Phase::spare)) {
      // Hung: make sure it cannot come back, then treat it as lost.
      signal_slot(s, SIGKILL);
      fault(s, "no heartbeat for " + std::to_string(e.warning.value) + " s (hung)", t - e.warning.value);
      continue;
    }
    if (e.to >= health::State::suspect && e.to != health::State::failed &&
        (s.phase == Phase::active || s.phase == Phase::spare)) {
      for (const auto& a : scheduler_.on_warning(s.device, e.warning.message, t)) journal_->action(a);
      if (s.phase == Phase::spare && scheduler_.state(s.device) == scheduler::DeviceState::cordoned) {
        ledger_.idle_spares_s += t - s.spare_since;
        s.phase = Phase::retiring;
        if (s.ch) s.ch->send(protocol::encode(protocol::Retire{"cordoned: " + e.warning.message}));
      }
    } else if (e.to == health::State::healthy && s.phase == Phase::active) {
      scheduler_.on_calm(s.device, t);
    }
  }
}

void Agent::maybe_migrate() {
  if (round_.active || !started_) return;
  for (Slot& s : slots_) {
    if (s.phase != Phase::active || !scheduler_.pending_migration(s.device)) continue;
    // Stop every rank after a step none has begun yet; the spare takes the
    // suspect's rank from the memory tier with nothing recomputed.
    const uint64_t boundary = progress() + 1;
    const double t = now();
    for (Slot* m : members()) {
      if (m->ch) m->ch->send(protocol::encode(protocol::StopAfter{static_cast<int64_t>(boundary)}));
    }
    const auto actions = scheduler_.at_step_boundary(boundary, t);
    for (const auto& a : actions) journal_->action(a);
    s.phase = Phase::retiring;
    round_ = Round{};
    round_.active = true;
    round_.cause = "migration of device " + std::to_string(s.device) + " (rank " + std::to_string(s.rank) +
                   ") before it fails";
    round_.fault_s = round_.detected_s = round_.abort_s = t;
    round_.reached = boundary + 1;
    round_.record = {{"cause", round_.cause},
                     {"fault_s", t},
                     {"detected_s", t},
                     {"reached_step", round_.reached},
                     {"proactive", true},
                     {"warning", monitor_.device(s.device).warnings.empty()
                                     ? json()
                                     : json(monitor_.device(s.device).warnings.front().message)}};
    for (Slot* m : members()) m->reported = false;
    journal_->write({{"event", "migration_started"},
                     {"device", s.device},
                     {"rank", s.rank},
                     {"boundary_step", boundary}});
    return;
  }
}

void Agent::watchdog() {
  const double t = now();
  const uint64_t p = progress();
  if (!started_ || round_.active || p != watched_progress_) {
    watched_progress_ = p;
    progress_since_ = t;
    return;
  }
  if (o_.step_timeout_s <= 0 || t - progress_since_ < o_.step_timeout_s) return;
  // No step completed for the timeout while every process still beats: a
  // collective is stuck. The rank(s) behind the others are the hung ones.
  int64_t lowest = INT64_MAX, highest = INT64_MIN;
  for (Slot* m : members()) {
    lowest = std::min(lowest, m->current_step);
    highest = std::max(highest, m->current_step);
  }
  progress_since_ = t;
  if (lowest == highest) {
    journal_->write(
        {{"event", "stalled"},
         {"step", lowest / 2},
         {"seconds", o_.step_timeout_s},
         {"note",
          "every rank is in the same step; no rank stands out, aborting the collective and retrying"}});
    start_round("every rank stalled in step " + std::to_string(lowest / 2) + " for " +
                    std::to_string(o_.step_timeout_s) + " s",
                t - o_.step_timeout_s);
    return;
  }
  for (Slot* m : members()) {
    if (m->current_step != lowest) continue;
    monitor_.observe_error(m->device, Code::timeout,
                           "collective stalled in step " + std::to_string(lowest / 2), t);
    signal_slot(*m, SIGKILL);
    fault(*m,
          "stuck in a collective of step " + std::to_string(lowest / 2) + " for " +
              std::to_string(o_.step_timeout_s) + " s while its peers had finished it",
          t - o_.step_timeout_s);
  }
}

uint64_t Agent::find_disk_checkpoints() {
  // The workers' checkpoint engines save below DIR/checkpoints, job "sigmarun".
  for (const auto& st : checkpoint::list_steps(o_.job_dir + "/checkpoints/sigmarun")) {
    for (uint32_t r : st.ranks)
      if (r < world_) disk_[r].insert(st.step);
  }
  return newest_common_disk(world_);
}

uint64_t Agent::newest_common_disk(uint32_t world) {
  std::set<uint64_t> common = disk_[0];
  for (uint32_t r = 1; r < world; ++r) {
    std::set<uint64_t> keep;
    for (uint64_t i : common)
      if (disk_[r].count(i)) keep.insert(i);
    common = std::move(keep);
  }
  return common.empty() ? 0 : *common.rbegin();
}

// SIGTERM or SIGINT: every rank stops after a step none has begun (the
// disk checkpoints taken so far stay, and a rerun in the folder resumes from
// the newest); a second signal, or a job that is not training, stops now.
void Agent::begin_stop(int sig) {
  const bool again = stop_signal_ != 0;
  stop_signal_ = sig;
  journal_->write({{"event", "stop_requested"}, {"signal", sig == SIGINT ? "SIGINT" : "SIGTERM"}});
  if (again || !started_ || round_.active || finished_) {
    stop_now();
    return;
  }
  const uint64_t boundary = progress() + 1;
  stop_deadline_ = now() + 10;
  for (Slot* m : members()) {
    if (m->ch) m->ch->send(protocol::encode(protocol::StopAfter{static_cast<int64_t>(boundary)}));
  }
}

// Stopping: done when every rank has stopped (or finished), or the deadline
// for that has passed.
void Agent::finish_stop() {
  bool all = true;
  for (Slot* m : members()) all &= m->phase == Phase::done || !m->alive;
  if (all || now() > stop_deadline_) stop_now();
}

void Agent::stop_now() {
  if (finished_) return;
  end_status_ = "stopped";
  end_why_ = stop_why();
  exit_code_ = 128 + stop_signal_;
  journal_->write({{"event", "stopped"}, {"reason", end_why_}});
  end_all(end_why_);
}

std::string Agent::stop_why() {
  return std::string("stopped by ") + (stop_signal_ == SIGINT ? "SIGINT" : "SIGTERM") + " after " +
         std::to_string(reached()) + " steps; " + resume_hint("");
}

// What a rerun in this folder resumes from: the newest disk checkpoint every
// rank committed, or why there is none (none was asked for, or the disk
// tier failed).
std::string Agent::resume_hint(const std::string& when) {
  const uint64_t kept = newest_common_disk(scheduler_.world_size());
  if (kept > 0)
    return "the disk checkpoint of step " + std::to_string(kept) + " is kept: rerun sigmarun in this folder" +
           (when.empty() ? "" : " " + when) + " to resume from it";
  if (storage_failures_ > 0)
    return "no disk checkpoint could be written (the disk tier failed " + std::to_string(storage_failures_) +
           " time(s), the last: " + storage_error_ + "), so a rerun starts from step 0";
  return "no disk checkpoint common to every rank was taken (--checkpoint-every), so a rerun starts from "
         "step 0";
}

void Agent::end_all(const std::string& why) {
  finished_ = true;
  for (Slot& s : slots_) {
    if (s.ch) s.ch->send(protocol::encode(protocol::Goodbye{why}));
  }
}

void Agent::finish_job() {
  if (finished_ || !started_ || round_.active) return;
  for (Slot* m : members()) {
    if (m->phase != Phase::done) return;
  }
  end_all("the job is done");
}

void Agent::progress_tick() {
  const double t = now();
  if (t - last_progress_ < 1.0) return;
  last_progress_ = t;
  publish_metrics();
  if (!o_.progress) return;
  std::fprintf(stderr, "sigmarun: %6.1f s | step %llu | world %u | spares %zu | incidents %zu%s\n", t,
               static_cast<unsigned long long>(reached()), scheduler_.world_size(),
               scheduler_.spares().size(), incidents_.size() + (round_.active ? 1 : 0),
               round_.active ? " | recovering" : "");
}

void Agent::publish_metrics() {
  if (!metrics_) return;
  MetricsSnapshot snap;
  snap.steps = reached();
  snap.wall_s = now();
  snap.incidents = incidents_.size() + (round_.active ? 1 : 0);
  snap.ledger = ledger_;
  snap.spares = scheduler_.spares().size();
  for (const auto& h : monitor_.devices()) {
    snap.devices.push_back(
        {h.device, h.score, health::state_name(h.state), scheduler::state_name(scheduler_.state(h.device))});
  }
  metrics_->publish(snap);
}

double Agent::median_step() const {
  if (step_window_.empty()) return 0;
  std::vector<double> v(step_window_.begin(), step_window_.end());
  std::nth_element(v.begin(), v.begin() + static_cast<long>(v.size() / 2), v.end());
  return v[v.size() / 2];
}

void Agent::settle_steps(size_t keep) {
  while (step_times_.size() > keep) {
    const double x = step_times_.begin()->second;
    step_times_.erase(step_times_.begin());
    step_window_.push_back(x);
    if (step_window_.size() > 1001) step_window_.pop_front();
    const double median = median_step();
    if (step_window_.size() >= 10 && x > 1.5 * median) ledger_.slow_steps_s += x - median;
  }
}

void Agent::write_report(const std::string& status, const std::string& why) {
  const double wall = now();
  settle_steps(0);
  const double median = median_step();
  for (Slot& s : slots_) {
    if (s.phase == Phase::spare && s.spare_since >= 0) ledger_.idle_spares_s += wall - s.spare_since;
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
  json report{{"status", status},
              {"reason", why},
              {"world", scheduler_.world_size()},
              {"spares", o_.spares},
              {"steps", reached()},
              {"generations", generation_},
              {"wall_s", wall},
              // Every *_s time here and in the journal counts from this
              // CLOCK_MONOTONIC reading, so that a worker's own stamps can
              // be set beside them.
              {"clock_origin_monotonic_s", t0_},
              {"median_step_s", median},
              {"incidents", incidents_},
              {"ledger", ledger_.to_json(wall)},
              {"spare_advice", advice},
              {"storage", {{"failed_saves", storage_failures_}, {"last_error", storage_error_}}},
              {"devices", devices}};
  write_json_file(o_.job_dir + "/report.json", report);
  if (storage_failures_ > 0)
    std::fprintf(stderr, "sigmarun: the disk tier is failing: %llu checkpoint save(s) failed, the last: %s\n",
                 static_cast<unsigned long long>(storage_failures_), storage_error_.c_str());
  std::fprintf(stderr, "sigmarun: %s after %llu steps in %.2f s%s%s; goodput %.3f; report: %s/report.json\n",
               status.c_str(), static_cast<unsigned long long>(reached()), wall, why.empty() ? "" : ": ",
               why.c_str(), report["ledger"]["goodput"].get<double>(), o_.job_dir.c_str());
  for (const json& inc : incidents_) {
    std::fprintf(stderr,
                 "  incident: %s\n    restored from %s at step %llu, %llu step(s) recomputed, back at the "
                 "reached step %.3f s after the fault\n",
                 inc.value("cause", std::string("?")).c_str(), inc.value("restore", std::string("-")).c_str(),
                 static_cast<unsigned long long>(inc.value("index", uint64_t{0})),
                 static_cast<unsigned long long>(inc.value("recomputed_steps", uint64_t{0})),
                 inc.contains("back_at_reached_step_s") && inc["back_at_reached_step_s"].is_number()
                     ? inc["back_at_reached_step_s"].get<double>()
                     : -1.0);
  }
  journal_->write({{"event", "end"}, {"status", status}, {"reason", why}});
}

int Agent::run() {
  fs::create_directories(o_.job_dir + "/logs");
  // Every run's rendezvous keys live apart (a job folder or a Redis is used
  // again by a resumed run, or by other jobs): stale keys never mix in.
  const std::string run_id =
      std::to_string(::getpid()) + "-" + std::to_string(static_cast<uint64_t>(health::monotonic_s() * 1e9));
  if (o_.store.empty()) {
    store_uri_ = "file://" + o_.job_dir + "/store/run-" + run_id;
  } else if (o_.store.rfind("redis://", 0) == 0) {
    const auto slash = o_.store.find('/', 8);
    store_uri_ = o_.store.substr(0, slash) + "/" +
                 (slash == std::string::npos ? std::string() : o_.store.substr(slash + 1) + "-") +
                 "sigmarun-" + run_id;
  } else {
    store_uri_ = (o_.store.rfind("file://", 0) == 0 ? o_.store : "file://" + o_.store) + "/run-" + run_id;
  }
  journal_ = std::make_unique<Journal>(o_.job_dir + "/incidents.jsonl", t0_);
  const int wake = sigchld_pipe();
  catch_stop_signals();
  listen_fd_ = runtime::listen_unix(o_.job_dir + "/agent.sock");
  ::fcntl(listen_fd_, F_SETFL, O_NONBLOCK);
  nodes_.resize(o_.nnodes);
  if (o_.nnodes > 1) {
    // Agents and workers on other hosts reach this one over TCP; they find
    // the address in the job's control store. The workers' rendezvous keys
    // get a fresh prefix per run, so stale keys of an earlier run never mix.
    int port = 0;
    tcp_fd_ = runtime::listen_tcp(o_.host, &port);
    ::fcntl(tcp_fd_, F_SETFL, O_NONBLOCK);
    tcp_addr_ = "tcp://" + o_.host + ":" + std::to_string(port);
    const std::string nonce =
        std::to_string(::getpid()) + "-" + std::to_string(static_cast<uint64_t>(health::monotonic_s() * 1e6));
    store_uri_ = control_store_uri(o_) + "-" + nonce;
    const std::string root = json{{"addr", tcp_addr_}, {"nonce", nonce}}.dump();
    bootstrap::open_store(control_store_uri(o_))->set("root", std::vector<uint8_t>(root.begin(), root.end()));
  }
  if (o_.metrics_port >= 0) {
    metrics_ = std::make_unique<MetricsServer>(o_.metrics_port);
    std::fprintf(stderr, "sigmarun: metrics on http://127.0.0.1:%d/metrics\n", metrics_->port());
    write_json_file(o_.job_dir + "/metrics.json", {{"port", metrics_->port()}});
  }
  journal_->write({{"event", "start"},
                   {"nproc", o_.nproc},
                   {"spares", o_.spares},
                   {"nnodes", o_.nnodes},
                   {"vendor", o_.vendor},
                   {"store", store_uri_},
                   {"agent", tcp_addr_},
                   {"vendor_options", o_.vendor_options},
                   {"worker", o_.worker}});
  slots_.resize(static_cast<size_t>(o_.nnodes) * (o_.nproc + o_.spares));
  for (uint32_t d = 0; d < slots_.size(); ++d) {
    slots_[d].device = d;
    slots_[d].node = d < world_ ? d / o_.nproc : (d - world_) / std::max(1u, o_.spares);
    monitor_.add_device(d);
    for (const auto& a : scheduler_.add_device(d, now())) journal_->action(a);
    if (slots_[d].node == 0) spawn(slots_[d]);
  }
  for (;;) {
    std::vector<pollfd> fds;
    fds.push_back({listen_fd_, POLLIN, 0});
    fds.push_back({wake, POLLIN, 0});
    if (tcp_fd_ >= 0) fds.push_back({tcp_fd_, POLLIN, 0});
    for (auto& n : nodes_) {
      if (n) fds.push_back({n->fd(), POLLIN, 0});
    }
    for (auto& p : pending_) fds.push_back({p->fd(), POLLIN, 0});
    for (Slot& s : slots_) {
      if (s.ch) fds.push_back({s.ch->fd(), POLLIN, 0});
    }
    ::poll(fds.data(), fds.size(), 20);
    drain_sigchld_pipe();
    if (const int sig = stop_signal(); sig != 0 && sig != stop_signal_) begin_stop(sig);
    accept_new();
    // Greetings: the first message names the device.
    for (auto it = pending_.begin(); it != pending_.end();) {
      auto m = (*it)->receive_ready();
      if ((*it)->closed()) {
        it = pending_.erase(it);
        continue;
      }
      if (!m) {
        ++it;
        continue;
      }
      std::unique_ptr<Channel> ch = std::move(*it);
      it = pending_.erase(it);
      greeted(std::move(ch), *m);
    }
    for (Slot& s : slots_) {
      if (s.ch) {
        read_messages(s);
        if (s.ch && s.ch->closed() && s.phase != Phase::done && s.phase != Phase::dead) {
          // The channel broke before the exit was reaped: the exit handler decides.
          s.ch.reset();
        }
      }
    }
    reap();
    for (uint32_t n = 1; n < nodes_.size(); ++n) node_messages(n);
    if (!started_ && !finished_) {
      bool all_heard = true;
      for (const Slot& s : slots_) all_heard &= s.phase != Phase::starting;
      // Ranks go to the lowest device ids that passed, so a job maps the same
      // way every time; a device slow to validate is waited for a while.
      if (scheduler_.spares().size() >= world_ && (all_heard || now() > o_.validate_timeout_s)) {
        // A job folder with disk checkpoints of every rank (a paused or
        // interrupted run): resume from the newest step they all hold.
        const uint64_t resume = find_disk_checkpoints();
        for (const auto& a : scheduler_.start(now())) {
          journal_->action(a);
          Slot& s = slots_[a.device];
          s.rank = a.rank;
          s.phase = Phase::active;
          s.ch->send(protocol::encode(
              protocol::Assign{a.rank, world_, 1, resume > 0 ? "disk" : "none", resume, {}}));
        }
        if (resume > 0) {
          journal_->write({{"event", "resumed"}, {"index", resume}, {"from", o_.job_dir + "/checkpoints"}});
          steps_reached_ = resume;
        }
        generation_ = 1;
        started_ = true;
      } else {
        uint32_t out = 0, plain = 0;
        bool running = false;
        for (Slot& s : slots_) {
          out += (s.phase == Phase::dead && !s.plain_done) || s.phase == Phase::retiring;
          plain += s.plain_done;
          running |= s.alive;
        }
        if (!running && out == 0 && plain >= world_) {
          end_status_ = "done";
          end_why_ =
              "every worker exited 0 without a sigma session: a plain program ran to its end (sigmarun "
              "watched it for crashes; recovery needs the session)";
          exit_code_ = 0;
          journal_->write({{"event", "done_without_session"}, {"reason", end_why_}});
          end_all(end_why_);
        }
        if (now() > o_.validate_timeout_s && !all_heard) {
          for (Slot& s : slots_) {
            if (s.phase == Phase::starting) {
              signal_slot(s, SIGKILL);
              fault(s, "never said hello within " + std::to_string(o_.validate_timeout_s) + " s", now());
            }
          }
        }
        if (slots_.size() - out < world_) {
          end_status_ = "unrecoverable";
          end_why_ = "only " + std::to_string(slots_.size() - out) +
                     " device(s) passed validation; the job needs " + std::to_string(world_);
          exit_code_ = 4;
          end_all(end_why_);
        }
      }
    }
    if (stop_signal_ != 0 && !finished_) finish_stop();
    if (!finished_) {
      health_tick();
      maybe_migrate();
      watchdog();
      advance_round();
      finish_job();
    }
    progress_tick();
    if (finished_) {
      bool alive = false;
      for (Slot& s : slots_) alive |= s.alive;
      if (!alive) break;
      if (finished_at_ < 0) finished_at_ = now();
      if (now() - finished_at_ > 10) {
        for (Slot& s : slots_) signal_slot(s, SIGKILL);
      }
    }
  }
  if (round_.active) incidents_.push_back(round_.record);
  for (auto& n : nodes_) {
    if (n) n->send(protocol::encode(protocol::NodeGoodbye{exit_code_, {}}));
  }
  write_report(end_status_, end_why_);
  publish_metrics();
  ::close(listen_fd_);
  ::unlink((o_.job_dir + "/agent.sock").c_str());
  return exit_code_;
}

}  // namespace

int run(const Options& options) {
  Agent agent(options);
  return agent.run();
}

}  // namespace sigma::sigmarun
