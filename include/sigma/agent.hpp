// sigma/agent.hpp -- the job agent: launches one worker process per device
// plus warm spares, hosts the health monitor and the scheduler, carries out
// their decisions and recovers the job from faults.
//
// `sigmarun` is this agent behind a command line; a host program (the
// Python module, a cluster manager's plugin) embeds it the same way:
//
//   sigma::runtime::AgentOptions o;
//   o.nproc = 4; o.spares = 1; o.job_dir = "/scratch/job"; o.worker = {"./train"};
//   sigma::runtime::Agent agent(o, [](const sigma::runtime::AgentEvent& e) {
//     if (e.event == "recovered") std::puts(e.json.c_str());
//   });
//   int status = agent.run();        // blocks until the job ends
//
// The agent writes JOB_DIR/incidents.jsonl (the journal: one JSON object per
// line, each with "t" and "event"), JOB_DIR/report.json (status, incidents,
// the goodput ledger, devices) and JOB_DIR/logs/device-N.log. Every journal
// line also reaches the observer, on the thread that runs run().
//
// The decisions themselves (restore tier, recovery rounds, resume, shrink or
// pause) are pure logic inside the library, driven by events and a clock;
// Agent adds the processes, sockets and files around them.
//
// Thread-safety: run() once, from one thread; request_stop() from any thread
// or a signal handler.
#pragma once

#include <sigma/export.hpp>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace sigma::runtime {

struct AgentOptions {
  uint32_t nproc = 1;      // ranks per node
  uint32_t spares = 0;     // spares per node
  uint32_t nnodes = 1;     // agents (hosts) in the job
  uint32_t node_rank = 0;  // 0: the root agent, which decides; others follow (run_follower)
  std::string host;        // where the root is reached (nnodes > 1)
  // The root's scheduler as a tree (sigma/hierarchy.hpp): a group
  // controller per this many agents replaces and migrates within its group
  // and escalates only a fault it has no spare for. 0: one group (flat).
  uint32_t nodes_per_group = 0;
  // Failure domains: a host's devices (ranks, then spares) make nodes of
  // this many, each a domain of its own (0: the host is one node). The
  // memory tier keeps each rank's replicas in another rack (a group of
  // nodes_per_group hosts) where it can, else in another node, else on the
  // ring; `replicas` copies of each (1 or 2).
  uint32_t devices_per_node = 0;
  uint32_t replicas = 1;
  // This host's rack (its switch, as the cluster names it: sigmarun
  // --rack, or under Slurm the topology address without its node). When
  // every host names one, racks are the domains the replicas cross first
  // (before nodes_per_group's groups). Empty: not known.
  std::string rack;
  // The host memory each host's memory tiers may take (the workers'
  // SIGMA_TIER_MEMORY_BYTES): a job that needs more is refused before it
  // starts. 0: each host's available memory.
  uint64_t tier_memory_bytes = 0;
  std::string job_id;  // names the job in the store; default: the job folder's name
  std::string vendor = "cpu";
  // Passed to every worker's plugin as SIGMA_HAL_OPTIONS; "{device}" becomes
  // the worker's device number.
  std::string vendor_options;
  // Device-time seconds per wall second, for the health monitor's windows
  // (a simulated device that compresses time); see health::time_scaled.
  double health_time_scale = 1;
  // Steps the health monitor's straggler rule waits to see before it warns
  // of a device (health::Config::straggler_min_steps). Fewer steps act on
  // less evidence: worth it where a migration costs little (contained
  // recovery moves a replica, the others step on).
  uint32_t straggler_min_steps = 20;
  std::string job_dir;  // required, absolute
  std::string store;    // empty: a file store in the job folder
  // The per-job secret (sigmarun: --secret-file or SIGMA_JOB_SECRET; at
  // least 16 bytes). Required with several agents: the root's record in the
  // store and every message between agents and workers are authenticated
  // with a key derived from it. Empty: nothing is (one host).
  std::string secret;
  double heartbeat_s = 0.1;  // worker heartbeat period
  double heartbeat_timeout_s = 3;
  double abort_grace_s = 5;        // survivors must report within this after an abort
  double step_timeout_s = 60;      // no step completed for this long: a stuck collective (0: off)
  double validate_timeout_s = 30;  // start without devices still validating after this
  // Every later phase of a recovery (the new assignment carried out: the
  // communicator, probe and restore) must finish within this, or the rank
  // that did not is replaced (or, when none did, the job pauses after a
  // few tries).
  double recovery_timeout_s = 60;
  uint64_t snapshot_every = 1;
  uint64_t checkpoint_every = 0;
  // The workers' retention (sigma::runtime::SessionOptions): memory-tier
  // snapshots kept, a full disk base every K checkpoints, disk checkpoints kept.
  size_t snapshot_keep = 2;
  uint32_t checkpoint_base_every = 4;
  uint32_t checkpoint_keep = 4;
  // Disk checkpoints written by the engine's thread while training goes on
  // (the agent hears of each once it is durable); false: each save is done
  // before step_end returns.
  bool checkpoint_async = false;
  int metrics_port = -1;  // -1 off, 0 any free port
  bool progress = true;   // a progress line on stderr every second
  bool proactive_migration = true;
  // A device whose worker process went -- crashed, exited, or killed by the
  // agent for not answering an abort or not beating -- while the device
  // itself never reported a loss is validated again with a fresh worker
  // (self-test, collective probe) at most this many times, and waits as a
  // spare when it passes: a driver crash or a stuck process is not a dead
  // chip. 0: such a device stays cordoned.
  uint32_t readmit_crashed = 0;
  // How a fault is recovered: `exact` stops every rank and restores them
  // all (bitwise equal to a fault-free run); `contained` stops only the
  // data-parallel replica of `replica_size` consecutive ranks the fault hit
  // while the other replicas step on and take over its micro-batches, and
  // its ranks take live state from a healthy replica (docs/sigmarun.md).
  enum class Recovery : uint8_t { exact, contained };
  Recovery recovery = Recovery::exact;
  // Ranks per data-parallel replica (it divides the world): every
  // assignment names the replicas, so workers form their replica and
  // data-parallel groups (under `exact` too). 0: no layout (contained
  // recovery needs one).
  uint32_t replica_size = 0;
  // Contained recovery: a rejoining replica that has replayed for this long
  // without catching up with the live replicas (its replay no faster than
  // their steps) rejoins anyway; the live replicas wait for it at the
  // rejoin's boundary.
  double catch_up_s = 5;
  bool allow_shrink = false;  // no spare left: go on with fewer ranks (a replicated, data-parallel state)
  uint32_t min_world = 1;     // ... but never fewer than this many ranks in all
  double failure_rate_per_device_hour = 0;  // for the spare advice in the report
  double repair_hours = 24;
  double job_hours = 24;
  std::vector<std::string> worker;  // program and arguments
};

// One journal line, as it is written.
struct AgentEvent {
  double t = 0;       // seconds since the agent started
  std::string event;  // "fault", "recovery_started", "assigned", "recovered", "end", ...
  std::string json;   // the whole line
};

using AgentObserver = std::function<void(const AgentEvent&)>;

class SIGMA_EXPORT Agent {
 public:
  // Throws Error(invalid_argument) for inconsistent options.
  explicit Agent(AgentOptions options, AgentObserver observer = {});
  ~Agent();
  Agent(const Agent&) = delete;
  Agent& operator=(const Agent&) = delete;

  // Runs the job to its end. Exit status: 0 done; 3 paused (degraded, state
  // persisted); 4 unrecoverable (the report says why); 128 + N stopped by
  // request_stop(N). Throws Error when the job cannot start (the folder,
  // the socket, the store, the worker program).
  int run();

  // Stops the job: every rank stops after a step none has begun, the report
  // is written and the disk checkpoints taken stay, so a rerun in the same
  // folder resumes. A second request stops at once. `signal` is what the
  // report names (SIGTERM, SIGINT). Async-signal-safe; any thread.
  void request_stop(int signal) noexcept;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Makes SIGTERM and SIGINT call request_stop() on `agent` instead of ending
// the process (what sigmarun does). Once per process; `agent` must outlive
// the handlers' use.
SIGMA_EXPORT void stop_agent_on_signals(Agent& agent);

// Runs a follower agent (node_rank >= 1): starts the workers the root asks
// for on this host, reports their exits and signals them. Exit status: the
// root's.
SIGMA_EXPORT int run_follower(const AgentOptions& options);

// At least this many bytes of job secret.
constexpr size_t kMinSecretBytes = 16;

// The job secret (AgentOptions::secret): from `file` when given (a regular
// file only its owner may read or write, its trailing newline dropped),
// else from `env_value` (SIGMA_JOB_SECRET); nullopt when neither is given.
// Throws Error(invalid_argument) naming the file or the variable and what
// is wrong: missing, not a regular file, open to others, too short, a NUL.
// Thread-safety: any thread.
SIGMA_EXPORT std::optional<std::string> read_job_secret(const std::string& file, const char* env_value);

}  // namespace sigma::runtime
