// The agent's decisions as pure logic: events and a clock in, commands out.
// It admits devices, starts the job (resuming from the job folder's disk
// checkpoints), watches health, heartbeats and step progress, runs recovery
// rounds (abort the survivors, collect what each holds, choose the restore,
// assign the next generation, watch it get back to the step it had
// reached), migrates ranks off suspect devices, stops on request, and keeps
// the ledger, the incidents and the report.
//
// A recovery round and its bounds:
//   reporting  survivors report within abort_grace_s, or are killed and
//              replaced (a rank that cannot leave its collective is hung);
//   assigned   every rank joins the new generation within
//              recovery_timeout_s: one that did not is replaced; when none
//              did, the assignment failed, and after a few the job pauses;
//   rejoined   the job gets back to the step it had reached; the step
//              watchdog bounds this like any other step.
// A second fault during a round joins the round: survivors that already
// reported keep their reports, and are never killed for waiting.
//
// The host (Agent, in host.cpp) owns processes, sockets and files: it feeds
// the events in, carries out the commands in order and writes the Record
// commands to the journal. The cluster simulator and the unit tests drive
// the same class with a clock of their own.
//
// Thread-safety: one thread at a time.
#pragma once

// GCC 12 reports the moves of a variant nested in a variant (SendTo's
// message inside Command) as "may be used uninitialized"; every alternative
// here has its members initialised.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

#include "runtime/agent/admission.hpp"
#include "runtime/agent/contained.hpp"
#include "runtime/agent/ending.hpp"
#include "runtime/agent/failure_domains.hpp"
#include "runtime/agent/job_exit.hpp"
#include "runtime/agent/records.hpp"
#include "runtime/agent/recovery_round.hpp"
#include "runtime/agent/restore_plan.hpp"
#include "runtime/agent/step_times.hpp"
#include "runtime/agent/step_watchdog.hpp"
#include "runtime/protocol.hpp"

#include <sigma/agent.hpp>
#include <sigma/health.hpp>
#include <sigma/hierarchy.hpp>

#include <nlohmann/json.hpp>

#include <compare>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <variant>
#include <vector>

namespace sigma::runtime::agent {

// ---- commands --------------------------------------------------------------

struct SpawnWorker {  // start the worker process for `device` on its node
  uint32_t device = 0;
};
struct SendTo {  // send `message` to the worker on `device` (dropped if unconnected)
  uint32_t device = 0;
  protocol::AgentMessage message;
};
struct SignalWorker {  // signal the worker process on `device`
  uint32_t device = 0;
  int signal = 9;
};
struct Disconnect {  // forget `device`'s connection: nothing it sends counts now
  uint32_t device = 0;
};
struct Record {  // one journal line (the host adds the time)
  nlohmann::json entry;
};
using Command = std::variant<SpawnWorker, SendTo, SignalWorker, Disconnect, Record>;
using Commands = std::vector<Command>;

enum class Phase { starting, spare, active, retiring, done, dead };

// Contained recovery (contained.hpp): the world is data-parallel replicas
// of `replica_size` consecutive ranks each (EP x PP); a fault stops only
// its replica. Not offered by sigmarun yet: the workers' side (re-forming
// the data-parallel groups, the live-state hand-off) is still to come.
// A stopped replica's ranks leave their collectives within the agent's
// abort_grace_s.
struct ContainedOptions {
  uint32_t replica_size = 0;
  uint64_t boundary_lead = contained::Options{}.boundary_lead;
  // False: the layout only (every assignment names the replicas, so the
  // workers form their groups) and every fault takes the exact round.
  bool contain_faults = true;
};

const char* phase_name(Phase p);

// The disk checkpoints found in the job folder before the start: rank ->
// committed step indices.
using DiskHoldings = std::map<uint32_t, std::set<uint64_t>>;

class Coordinator {
 public:
  // `t` is the clock's reading at the agent's start (usually 0).
  // Throws Error(invalid_argument) when `contained`'s replica size does not
  // divide the world, or the job may shrink (contained keeps its size).
  Coordinator(const AgentOptions& options, DiskHoldings disk, double t,
              std::optional<ContainedOptions> contained = std::nullopt);

  // Devices in all, node of each device.
  uint32_t devices() const { return static_cast<uint32_t>(slots_.size()); }
  uint32_t node_of(uint32_t device) const { return slots_.at(device).node; }
  uint32_t world() const { return world_; }

  // ---- events ----
  // The agent is up: launch node 0's workers.
  Commands start(double t);
  // A node agent connected: launch its workers. `rack`: its host's (empty: unknown).
  Commands node_joined(uint32_t node, const std::string& rack, double t);
  // Whether a hello from `device` is expected (else the host refuses it).
  bool expects_hello(uint32_t device) const;
  Commands hello(const protocol::Hello& h, double t);
  Commands message(uint32_t device, const protocol::WorkerMessage& m, double t);
  // The worker process on `device` ended, and how.
  Commands exited(uint32_t device, const protocol::ProcessEnd& end, double t);
  Commands stop_requested(int signal, double t);
  // Health, migration, watchdog, rounds, start and end: call often (the
  // agent does every 20 ms or on each event).
  Commands tick(double t);

  // ---- state ----
  bool finished() const { return ending_.finished(); }  // goodbyes sent
  // finished and every process gone: the host may write the report and leave.
  bool over() const;
  bool alive(uint32_t device) const { return slots_.at(device).alive; }
  Phase phase(uint32_t device) const { return slots_.at(device).phase; }
  int64_t rank(uint32_t device) const { return slots_.at(device).rank; }
  int exit_code() const { return ending_.code(); }
  const std::string& status() const { return ending_.status(); }
  const std::string& reason() const { return ending_.why(); }
  uint64_t generation() const { return generation_; }
  bool recovering() const { return round_.active(); }
  uint64_t reached() const;
  uint32_t world_size() const { return scheduler_.world_size(); }
  size_t spares() const { return scheduler_.spares().size(); }
  const std::vector<nlohmann::json>& incidents() const { return round_.incidents(); }
  const health::Monitor& monitor() const { return monitor_; }
  // Contained recovery's decisions (nullptr in exact mode).
  const contained::Machine* contained() const { return contained_ ? &*contained_ : nullptr; }

  // The final report (settles the ledger: call once, at the end).
  nlohmann::json report(double t);
  MetricsSnapshot metrics(double t) const;

 private:
  // Why the agent holds a worker failed: the kind decides (whether the
  // device itself is gone, whether a fresh process may validate it again),
  // the words are for the journal and the report.
  struct Fault {
    enum class Kind : uint8_t {
      process_ended,     // its process ended unexpectedly
      node_lost,         // its host's agent is gone, and the process with it
      device_lost,       // the device reports itself lost
      abort_unanswered,  // it did not leave its collective within abort_grace_s
      hung,              // no heartbeat within the heartbeat timeout
      never_greeted,     // no hello within validate_timeout_s
      stuck_in_step,     // inside a step's collective its peers had finished
      join_stuck,        // did not join the new generation in time
      left_early,        // finished and left before a peer failed in the last steps
    };
    Kind kind;
    std::string words;
    bool device_said() const { return kind == Kind::device_lost || kind == Kind::node_lost; }
    // Its process went (crashed, or killed for not answering or not
    // beating) while the device never said it was lost.
    bool process_went() const {
      return kind == Kind::process_ended || kind == Kind::abort_unanswered || kind == Kind::hung;
    }
  };

  struct Slot {
    uint32_t device = 0;
    uint32_t node = 0;
    bool alive = false;      // a process exists (or is being started) for it
    bool connected = false;  // its hello was heard and the connection stands
    Phase phase = Phase::starting;
    int64_t rank = -1;
    double spare_since = -1;
    int64_t last_step = -1;
    std::optional<StepPosition> position;  // none before its first heartbeat (behind every position)
    bool reported = false;
    bool plain_done = false;  // exited 0 without ever greeting: a plain program that finished
    std::set<uint64_t> own;
    std::map<uint32_t, std::set<uint64_t>> replicas;  // by the rank whose state they are
    uint64_t joined_gen = 0;
    uint64_t epoch = 0;       // contained: the last live set it carried out
    bool newcomer = false;    // a spare given a rank, not yet joined
    bool abort_sent = false;  // aborted in this round, its report still to come
    double comm_s = 0, restore_s = 0;
    std::vector<hal_telemetry_sample_t> telemetry;  // the latest heartbeat's, for /metrics
    std::string readmit_cause;                      // to validate again once its process is gone
  };

  // Everything below appends to out_.
  void record(nlohmann::json entry) { out_.push_back(Record{std::move(entry)}); }
  void send(const Slot& s, protocol::AgentMessage m);
  void kill(Slot& s);
  void spawn(Slot& s);
  void act(const std::vector<scheduler::Action>& actions);
  Commands take();

  void recover_request(Slot& s, const protocol::RecoverRequest& m);
  void fault(Slot& s, const Fault& f, double fault_s);
  void start_round(const std::string& cause, double fault_s, bool from_report = false);
  void maybe_readmit(Slot& s, const Fault& f);
  void readmit(Slot& s);
  void advance_round();
  void assign_generation();
  bool awaits_validation() const;
  void assignment_overdue();
  void rejoined();
  void fail_assignment(const std::string& why);
  std::vector<recovery::RankHoldings> holdings();
  FailureDomains::Placement placement();
  protocol::Assign assignment(uint32_t rank, uint64_t generation, RestoreTier tier, uint64_t index,
                              const std::vector<std::pair<uint32_t, uint32_t>>& handoff,
                              const FailureDomains::Placement& where);
  void forget_disk_after(uint64_t index);
  // Ends the job: every worker is told `goodbye` (default: `why`).
  void end(const std::string& status, const std::string& why, int code, std::optional<journal::Event> event,
           const std::string& goodbye = {});
  void maybe_start();
  void start_job();
  void health_tick();
  void maybe_migrate();
  void watchdog();
  void finish_stop();
  void stop_now();
  void finish_job();
  std::string stop_why() const;
  std::string resume_hint(const std::string& when) const;
  std::string no_disk_why() const;
  uint64_t newest_common_disk(uint32_t world) const;
  uint64_t progress() const;
  Slot* slot_of_rank(uint32_t rank);
  std::vector<Slot*> members();

  // Contained recovery (coordinator_contained.cpp).
  bool contained_takes(Slot& s, const Fault& f, const std::string& words);
  bool contained_reported(Slot& s, const std::string& words);
  bool contained_migrates(Slot& s, const std::string& cause);
  void apply(const contained::Actions& actions);
  void send_reform(const contained::Reform& r);
  protocol::Assign peer_assignment(uint32_t rank);
  void reformed_check();
  void contained_tick();
  void contained_step(const Slot& s, uint64_t step);
  bool parked(const Slot& s) const;  // its replica is out: it waits, it does not step
  // Its replica was stopped and it has reported: it waits in its recovery
  // for an assignment, exact round or not, and does not report again.
  bool waits_stopped(const Slot& s) const;
  void contained_fields(protocol::Assign& a) const;

  AgentOptions o_;
  uint32_t world_;
  scheduler::Hierarchy scheduler_;  // one group per nodes_per_group agents; one group: the flat decisions
  health::Monitor monitor_;
  double t_ = 0;  // the clock at the event being handled
  std::vector<Slot> slots_;
  Commands out_;
  bool started_ = false;
  uint64_t generation_ = 0;
  RecoveryRound round_;  // the round in progress and every round's record
  Ledger ledger_;
  uint64_t steps_reached_ = 0;
  StepTimes step_times_;
  Admission admission_;  // the start, the devices dropped, readmission after a crash
  StepWatchdog watchdog_;
  FailureDomains domains_;                       // which devices fail together, where the replicas go
  Ending ending_;                                // stopping, the end's status and code, the goodbye's grace
  uint64_t storage_failures_ = 0;                // disk checkpoints that could not be written
  std::string storage_error_;                    // the last one's reason
  DiskHoldings disk_;                            // rank -> committed disk indices
  uint32_t replica_size_ = 0;                    // contained: ranks per replica
  std::optional<contained::Machine> contained_;  // contained recovery's decisions
  // Contained: the ranks that must carry out each epoch's Reform.
  std::map<uint64_t, std::vector<uint32_t>> reform_ranks_;
  // Contained: the steps every live rank has finished, and whether the last
  // message finished one more (the moment a migration stops its replica).
  uint64_t live_done_ = 0;
  bool step_edge_ = false;
};

}  // namespace sigma::runtime::agent
