// sigma/sim.hpp -- the cluster simulator: a discrete-event, seeded,
// deterministic model of one synchronous training job on a cluster of
// early-life accelerators, run under several recovery policies with the
// same failure draws.
//
// It decides nothing itself: synthetic telemetry feeds the real health
// Monitor, the real Scheduler places ranks, replaces and migrates, and the
// real restore planner chooses the tier. The simulator applies their
// actions, advances a clock and books every accelerator-second once.
//
// Thread-safety: run() and sweep() are pure functions of their arguments
// (sweep runs its points on oneTBB's pool); nothing is shared.
#pragma once

#include <sigma/export.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace sigma::sim {

// How far a failure reaches and how the job meets it.
enum class Scope : int {
  device,    // one accelerator dies; it goes to repair
  node,      // every accelerator of its node dies; they go to repair
  software,  // a process crashes; the hardware is fine
  hang,      // a collective hangs; found by the policy's hang detection
  silent,    // silent data corruption; found by the policy's SDC detection
};
SIGMA_EXPORT const char* scope_name(Scope s) noexcept;

struct Category {
  std::string name;
  Scope scope = Scope::device;
  double weight = 0;       // share of all failures (counts from the source)
  bool precursor = false;  // telemetry can show it coming (hardware of the accelerator)
};

// The failure model: a base rate, its early-life multiplier, the hazard's
// shape, the categories and the assumptions that must be swept.
struct FailureModel {
  double per_accelerator_day = 4.74e-4;  // Llama 3's unexpected interruptions per GPU-day
  double rate_multiplier = 5;            // early-life hardware vs Llama 3's (assumed)
  double weibull_shape = 0.7;            // < 1: infant mortality, a hazard falling with age
  double precursor_fraction = 0.3;       // of precursor-capable failures (assumed)
  double precursor_lead_min = 30;        // how long before the failure telemetry drifts (assumed)
  double repair_hours = 24;              // (assumed)
  std::vector<Category> categories;
  // Degradations: the device keeps working but slows the synchronous job
  // until the episode clears or its rank moves away (all assumed). A
  // straggler's steps take `straggler_slowdown` times as long; a slow link's
  // collectives stretch the step by `slow_link_slowdown`, and its link
  // error counter climbs, which the health monitor reads.
  double straggler_per_accelerator_day = 1e-3;
  double straggler_slowdown = 1.5;
  double straggler_hours = 6;
  double slow_link_per_accelerator_day = 1e-3;
  double slow_link_slowdown = 1.15;
  double slow_link_hours = 12;
};

// Reads the public failure figures (data/failure-model.json): the base rate
// and the categories with their counts; the assumptions take the middle of
// each swept list. Throws Error(invalid_argument) naming the file and field.
SIGMA_EXPORT FailureModel load_failure_model(const std::string& path);
// The same from the file's text; `name` is the file named in errors.
SIGMA_EXPORT FailureModel parse_failure_model(const std::string& json, const std::string& name);

enum class SpareRule : int { none, fraction, model, count };

// One recovery policy. Times in seconds.
struct Policy {
  std::string name;
  SpareRule spares = SpareRule::none;
  double spare_fraction = 0;    // SpareRule::fraction
  double spare_risk = 0.01;     // SpareRule::model: chance of running out during the job
  uint32_t spare_count = 0;     // SpareRule::count
  double disk_every_s = 1800;   // job progress between disk checkpoints
  double disk_stall_s = 60;     // training blocked per disk checkpoint
  double disk_restore_s = 120;  // reading the checkpoint back
  bool memory_tier = false;     // in-memory snapshots, replicated on peers
  // Where each rank's replicas are: in other nodes, as the runtime places
  // them across failure domains (checkpoint::ReplicaPlacement), or on the
  // ring neighbour (false: rank r's on r + 1, often the same node); and
  // how many (1 or 2).
  bool replicas_across_nodes = false;
  uint32_t replicas = 1;
  double snapshot_every_s = 0;  // job progress between snapshots
  // ... or Young and Daly's interval from the failure model instead:
  // sqrt(2 x snapshot_stall_s x the job's mean time between failures), in
  // whole steps.
  bool snapshot_from_model = false;
  double snapshot_stall_s = 0;  // training blocked per snapshot
  double memory_restore_s = 0;  // from a surviving rank's memory or its ring neighbour's replica
  double crash_detect_s = 5;    // a dead process or device
  double hang_detect_s = 600;   // a hung collective ...
  // ... or, > 0, as the agent's step watchdog finds it (sigmarun
  // --step-timeout): when no step has completed for this long, counted
  // from the job's last step boundary.
  double step_timeout_s = 0;
  double sdc_detect_s = 7200;  // silent corruption until found
  bool full_restart = true;    // every fault restarts every rank (else: replace one rank)
  double restart_s = 600;      // full restart: reschedule, start, rendezvous
  double replace_s = 30;       // one rank swapped for a warm spare, communicators re-formed
  bool migrate_on_warning = false;
  double migrate_s = 10;  // state handed to a spare at a step boundary
  // Steps the health monitor's straggler rule sees before it warns
  // (sigmarun's --straggler-steps; the Monitor's default 20).
  uint32_t straggler_min_steps = 20;
  bool allow_shrink = false;  // no spare left: go on with fewer ranks ...
  uint32_t min_world = 1;     // ... but never fewer than this
  // Contained recovery (the runtime's contained::Machine decides): the
  // world is data-parallel replicas of `replica_size` consecutive ranks
  // (0: every fault takes the exact round). A fault stops its replica; the
  // others step on, each data-parallel group re-formed over the live
  // replicas; the replica's lost ranks get spares (or wait for one, the job
  // degraded) and take live state from a healthy replica at a step
  // boundary. The costs, each a stated assumption (docs/sim.md):
  uint32_t replica_size = 0;
  double comm_fixed_s = 1;            // creating a communicator: fixed + per member x members
  double comm_per_member_s = 4.6e-4;  // ... 60 s for a world of 131,072
  double handoff_s = 0.4;             // one rank's live state moved from its donor, all ranks at once
  double spare_ready_s = 5;           // a replacement process up and connected
};

// "reactive" (torchrun-like), "sigma-paper" (SIGMA's published stack) and
// "libsigma" (ours), with the defaults docs/sim.md derives.
SIGMA_EXPORT std::vector<Policy> standard_policies();

// A failure at a fixed time, beside (or, with rate_multiplier 0, instead
// of) the drawn ones: for hand-checked cases and replayed incidents.
struct ScriptedFailure {
  double at_s = 0;
  uint32_t device = 0;
  std::string category;    // a name from FailureModel::categories
  bool precursor = false;  // telemetry drifts for precursor_lead_min before it
  // Not a failure but a health change a replayed journal saw: "warning"
  // (the monitor turned the device suspect or failing) or "calm" (healthy
  // again); or a degradation: "straggler" or "slow_link" (the model's
  // slowdown and duration). Empty: a failure of `category`.
  std::string health{};
};

struct Scenario {
  uint64_t seed = 1;
  uint32_t accelerators = 2048;
  uint32_t per_node = 8;
  double days = 75;
  double step_s = 10;  // one training step
  double telemetry_period_s = 30;
  FailureModel failures;
  std::vector<Policy> policies;
  std::vector<ScriptedFailure> script;
  // The scheduler's locality groups (scheduler::Config::groups), as
  // sigmarun's --nodes-per-group makes them; empty: none.
  std::vector<uint32_t> groups;
  bool record_decisions = false;  // keep every scheduler action in PolicyResult::decisions
};

// A scenario file (YAML, docs/sim.md): the cluster, the job, the failure
// assumptions and the policies, each key checked. The failure model is
// `failures` (its `model:` key names another failure-model file, relative
// to the scenario's folder) over `defaults`; policies name a standard one
// and change what they list. Throws Error(invalid_argument)
// "file:line: key: why".
SIGMA_EXPORT Scenario load_scenario(const std::string& path, const FailureModel& defaults);
// The same from the file's text; `name` is the file named in errors and the
// folder of its relative paths.
SIGMA_EXPORT Scenario parse_scenario(const std::string& yaml, const std::string& name,
                                     const FailureModel& defaults);

// Accelerator-seconds by what they were spent on; they add up to
// accelerators x duration.
struct SIGMA_EXPORT Ledger {
  double productive = 0;  // training that was kept
  double lost_work = 0;   // training thrown away by a rollback
  double detection = 0;   // the job stalled before a fault was noticed
  double restart = 0;     // processes restarted, communicators re-formed
  double restore = 0;     // state read back
  double checkpoint = 0;  // training blocked by disk checkpoints and snapshots
  double migration = 0;   // training blocked by proactive migrations
  double paused = 0;      // job ranks idle for want of a device
  double degraded = 0;    // a stopped replica's ranks idle while the others step on (contained)
  double slow = 0;        // training time lost to a degraded pace (stragglers, slow links)
  double spare = 0;       // healthy spares waiting
  double repair = 0;      // accelerators out of service (failed, in repair, validating)
  double total() const noexcept;
};

// One scheduler action, as the simulator or sigmarun's journal has it.
struct Decision {
  double at_s = 0;
  std::string action;  // scheduler::action_name: "replace", "restore", ...
  uint32_t device = UINT32_MAX, rank = UINT32_MAX, to_device = UINT32_MAX;
  std::string tier;
};

// How long something took, over `count` of them.
struct LatencyFigures {
  uint64_t count = 0;
  double p50_s = 0, p99_s = 0, max_s = 0;
};

struct PolicyResult {
  std::string policy;
  uint32_t spares = 0;
  uint32_t world = 0;
  // The chance, under the failure model, that the pool runs out in some
  // repair window: the job pauses, or under contained recovery a replica
  // waits degraded for a device.
  double spare_risk = 0;
  Ledger ledger;
  double utilization = 0;  // productive / (accelerators x duration)
  double ettr = 0;         // the job's productive time / duration
  uint64_t failures = 0;   // every failure drawn, spares' and repaired devices' included
  // Exact recovery rounds, kept by the agent's RecoveryRound: a failure
  // that stops the job begins one, or joins the one in progress short of
  // its rejoin (`joined`); `recovery` is each round's time from its fault
  // to the job back at the step it had reached.
  uint64_t incidents = 0;  // rounds: the times the job stopped
  uint64_t joined = 0;
  LatencyFigures recovery;
  double mtti_h = 0;  // the job's mean time to interruption: duration / (incidents + joined) (0: none)
  uint64_t migrations = 0;
  uint64_t averted = 0;  // failures of a device already migrated away from
  uint64_t restores_memory = 0, restores_disk = 0;
  uint64_t pauses = 0;
  uint64_t degradations = 0;        // stragglers and slow links that began on a job's device
  uint64_t degradations_moved = 0;  // ... whose rank the policy moved away before they cleared
  // Contained recovery: faults a replica took alone, rounds that fell back
  // to the exact one, and hand-offs of live state that ended in a rejoin.
  uint64_t contained = 0, exact_fallbacks = 0, rejoins = 0;
  uint64_t events = 0;  // discrete events processed (queue, internal and the contained machine's calls)
  std::vector<std::pair<std::string, uint64_t>> by_category;  // failures per category
  std::vector<Decision> decisions;                            // Scenario::record_decisions
};

struct Result {
  Scenario scenario;
  std::vector<PolicyResult> policies;
};

// Runs every policy of `scenario` over the same failure draws. Deterministic:
// the same scenario gives the same result, bit for bit. Throws
// Error(invalid_argument) for an impossible scenario.
SIGMA_EXPORT Result run(const Scenario& scenario);

// The scenario under every combination of the failure model's assumed
// values (rate multiplier, precursor fraction, lead, repair time), each run
// as run() would; oneTBB runs the points in parallel, the order of the
// result is the order of the combinations.
struct SweepAxes {
  std::vector<double> rate_multiplier{2, 5, 10};
  std::vector<double> precursor_fraction{0.0, 0.3, 0.6};
  std::vector<double> precursor_lead_min{5, 30, 120};
  std::vector<double> repair_hours{4, 24, 72};
  // Stragglers and slow links, low / middle / high together: each level
  // sets both rates (per accelerator-day) and the straggler's slowdown.
  struct Degradation {
    double per_accelerator_day;
    double straggler_slowdown;
  };
  std::vector<Degradation> degradation{{2e-4, 1.2}, {1e-3, 1.5}, {5e-3, 2.0}};
};
SIGMA_EXPORT std::vector<Result> sweep(const Scenario& base, const SweepAxes& axes);

// ---- Sensitivity to the cost model ----------------------------------------
//
// `p` with every cost scaled by `factor`: detection, restarts, restores,
// checkpoint and snapshot stalls, migrations, communicator creation, the
// hand-off and a replacement's start.
SIGMA_EXPORT Policy scale_costs(Policy p, double factor);

// The scenario under the cost variants docs/sim.md reports, each run as
// run() would (in parallel): every cost x0.5, x1 and x4, and every
// data-parallel re-form at the world communicator's 60 s ("world re-form").
struct CostVariant {
  std::string name;
  Result result;
};
SIGMA_EXPORT std::vector<CostVariant> sensitivity(const Scenario& scenario);
SIGMA_EXPORT std::string to_json(const std::vector<CostVariant>& variants);

// The result as JSON (scenario, per-policy ledger and figures) and as a
// fixed-width table, one row per policy.
SIGMA_EXPORT std::string to_json(const std::vector<Result>& results);
SIGMA_EXPORT std::string to_table(const Result& result);

// ---- Replaying what the runtime did --------------------------------------
//
// A sigmarun job's incident journal (JOB_DIR/incidents.jsonl) as a
// scenario: the layout from its start line, its faults and health changes
// as the script (nothing drawn, nothing repaired), one policy like the
// agent's (a spare replaces one rank; the memory tier every
// --snapshot-every steps), and the decisions the agent journalled. Run it
// and compare: the simulator's decisions should be the agent's.
struct Replay {
  Scenario scenario;
  std::vector<Decision> journalled;
  uint64_t faults = 0, health_changes = 0;
};

// Throws Error(invalid_argument) "name:line: field: why" for a journal it
// cannot read (no start line, a line that is not JSON, a device out of
// range).
SIGMA_EXPORT Replay parse_journal(const std::string& jsonl, const std::string& name);

// The recovery decisions (replace, restore, migrate, shrink, pause, resume)
// of both, in order, by device, rank, target and tier: "" when they agree,
// else the first difference in words.
SIGMA_EXPORT std::string compare_decisions(const std::vector<Decision>& journalled,
                                           const std::vector<Decision>& simulated);

// ---- The control plane under load ----------------------------------------
//
// How long decisions take when every accelerator's node agent reports to
// one flat scheduler, and when it reports to its group's controller under a
// root (scheduler::Hierarchy). Every event runs the real code on this
// machine: the agent protocol's heartbeat (JSON, with telemetry) decoded,
// the health Monitor fed and evaluated, the scheduler's fault decision. The
// time each call takes is its service time; the calls then queue at their
// controller (one thread each, as the agent's control loop) in virtual time,
// with a network hop per message between levels. The event counts are
// deterministic; the latencies are measurements and vary run to run.
struct ControlPlaneSpec {
  uint32_t accelerators = 2048;
  uint32_t group_size = 256;       // accelerators per group controller
  double spare_fraction = 0.03;    // spares, spread over the groups
  double report_period_s = 0.1;    // heartbeat with telemetry per accelerator (sigmarun's default)
  double tick_s = 1;               // each controller evaluates its Monitor
  double fault_rate_per_s = 1e-4;  // hard faults per accelerator-second (a storm: ~1,000x early life)
  double seconds = 5;              // virtual time simulated
  double hop_s = 100e-6;           // node agent <-> its group controller
  double root_hop_s = 500e-6;      // node agent or group controller <-> the root
  size_t history_samples = 8;      // the Monitor's telemetry history per device
  uint64_t seed = 1;
};

struct ControlPlaneResult {
  std::string mode;  // "flat" or "hierarchical"
  uint32_t accelerators = 0;
  uint32_t controllers = 0;        // servers: 1 (flat) or the root and the groups
  LatencyFigures reports;          // a heartbeat's arrival to its decision
  LatencyFigures faults;           // a fault to the action back at the node agent
  uint64_t escalations = 0;        // faults the root decided
  double root_events_per_s = 0;    // offered to the root
  double root_capacity_per_s = 0;  // the root's events per busy second
  double busiest_utilisation = 0;  // busy / simulated time of the busiest controller (> 1: it falls behind)
  double service_p50_s = 0;        // one report's service time
};

// Both modes over the same events. Throws Error(invalid_argument) for a
// spec that cannot run.
SIGMA_EXPORT std::vector<ControlPlaneResult> control_plane(const ControlPlaneSpec& spec);
SIGMA_EXPORT std::string to_table(const std::vector<ControlPlaneResult>& results);
SIGMA_EXPORT std::string to_json(const std::vector<ControlPlaneResult>& results);

}  // namespace sigma::sim
