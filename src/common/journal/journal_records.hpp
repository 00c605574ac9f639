// The incident journal's lines (JOB_DIR/incidents.jsonl): one JSON object
// per line, "event" naming its kind and "t" the seconds since the agent
// started. One definition: the agent writes these, sigma-report and
// `sigma-sim --replay` read them. Names and fields are the file format:
// kinds and fields are added, never renamed or retyped, so every journal
// written so far still reads (tests/data/ keeps one). Every kind has a
// record type; kinds of one shape share one (Health, ProcessExit,
// JobEnded, NodeEvent), their `kind` saying which. Writers encode a
// record; nothing writes a line by hand.
//
// Thread-safety: pure functions.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

namespace sigma::journal {

enum class Event : uint8_t {
  unknown,  // a kind this build does not know (a newer writer's): read past, never an error
  start,
  end,
  launch,
  validated,
  exit,
  exited_without_session,
  fault,
  readmit,
  recovery_started,
  assigned,
  rejoined,
  recovered,
  recovery_overdue,
  resumed,
  migration_started,
  stalled,
  stop_requested,
  stopped,
  paused,
  unrecoverable,
  scheduler,
  health_state,
  warning,
  warning_cleared,
  storage_failed,
  numerics,
  node_joined,
  node_lost,
  bad_message,
  refused_connection,
  refused_env,
  joined_root,
  goodbye,
  root_lost,
  done_without_session,
};

// The name written as "event" ("unknown" for Event::unknown).
const char* name(Event e) noexcept;
// The kind named `text`; Event::unknown for a name no kind has.
Event event_named(std::string_view text) noexcept;

// The job's shape, first line of every journal.
struct Start {
  std::string job_id;
  uint32_t nproc = 0, spares = 0, nnodes = 1, nodes_per_group = 0, min_world = 1;
  uint64_t snapshot_every = 1, checkpoint_every = 0;
  bool proactive_migration = true, allow_shrink = false;
  std::string recovery = "exact";  // or "contained": a fault stops its replica of replica_size ranks
  uint32_t replica_size = 0;
  std::string vendor, store, agent, vendor_options;
  nlohmann::json worker = nlohmann::json::array();  // program and arguments
  bool operator==(const Start&) const = default;
};

// A device's worker lost (crashed, hung, stuck, its node gone).
struct Fault {
  uint32_t device = 0;
  int64_t rank = -1;  // -1: a device that held none (a spare)
  std::string phase, cause;
  double detected_after_s = 0;
  bool operator==(const Fault&) const = default;
};

// The health monitor: a state change (health_state) or a warning raised
// or cleared.
struct Health {
  Event kind = Event::health_state;  // health_state, warning or warning_cleared
  uint32_t device = 0;
  std::string from, to;  // health_state only
  // The warning behind it, when one is (rule empty otherwise).
  std::string signal, rule, severity, message;
  double value = 0, threshold = 0;
  std::optional<double> eta_s;
  bool operator==(const Health&) const = default;
};

struct RecoveryStarted {
  std::string cause;
  std::optional<uint64_t> reached_step;
  bool operator==(const RecoveryStarted&) const = default;
};

// A scheduler action ("assign", "replace", "restore", "migrate", ...).
struct Scheduler {
  std::string action, reason;
  std::optional<uint32_t> device, rank, to_device;
  std::string tier;         // restore only
  uint32_t world_size = 0;  // 0: not said
  bool operator==(const Scheduler&) const = default;
};

// A device whose worker crashed, validated again.
struct Readmit {
  uint32_t device = 0;
  std::string cause;
  uint32_t time = 0, of = 0;  // the time-th readmission of at most `of`
  bool operator==(const Readmit&) const = default;
};

// A disk checkpoint that could not be written (a storage incident).
struct StorageFailed {
  uint32_t device = 0;
  int64_t rank = -1;
  uint64_t index = 0;
  std::string reason;
  bool operator==(const StorageFailed&) const = default;
};

// ---- the job -----------------------------------------------------------------

// The job ended. The root agent says its status and reason; a node agent
// says the exit code it leaves with.
struct End {
  std::string status, reason;
  std::optional<int64_t> code;
  bool operator==(const End&) const = default;
};

// How the job ended when it did not simply finish: stopped, paused,
// unrecoverable, done_without_session.
struct JobEnded {
  Event kind = Event::stopped;
  std::string reason;
  bool operator==(const JobEnded&) const = default;
};

// The job started from the disk checkpoint of step `index`.
struct Resumed {
  uint64_t index = 0;
  std::string from;  // the checkpoint folder
  bool operator==(const Resumed&) const = default;
};

// A stop was asked for ("SIGTERM" or "SIGINT").
struct StopRequested {
  std::string signal;
  bool operator==(const StopRequested&) const = default;
};

// Rank 0's step came with a numerics decision worth reporting.
struct Numerics {
  uint64_t step = 0;
  std::string note;
  bool operator==(const Numerics&) const = default;
};

// ---- processes and devices -----------------------------------------------------

// A worker process started on `device` (node: said by the root agent).
struct Launch {
  uint32_t device = 0;
  std::optional<uint32_t> node;
  int64_t pid = 0;
  bool operator==(const Launch&) const = default;
};

// A worker's self-test, as its hello said.
struct Validated {
  uint32_t device = 0;
  bool passed = false;
  std::string detail;
  bool operator==(const Validated&) const = default;
};

// A worker process ended: as a node agent saw it (exit), or a program
// without the session that ran to its end (exited_without_session).
struct ProcessExit {
  Event kind = Event::exit;
  uint32_t device = 0;
  std::string status;  // "exited with status 0", "killed by signal 9", ...
  bool operator==(const ProcessExit&) const = default;
};

// ---- recovery ------------------------------------------------------------------

// A new generation assigned, and what it restores.
struct Assigned {
  uint64_t generation = 0;
  std::string restore;  // "none", "memory" or "disk"
  uint64_t index = 0;
  std::vector<std::pair<uint32_t, uint32_t>> handoff;  // memory: (holder, receiver) ranks
  std::vector<uint32_t> devices;                       // rank r's device at r
  // The memory tier's placement: rank r's failure domain at r, and where
  // the replicas are ("rack", "node": each in another one; "shared": the
  // ring, the domains allowing no better). Empty in older journals.
  std::vector<uint32_t> domains;
  std::string replicas_across;
  bool operator==(const Assigned&) const = default;
};

// Not every rank joined the generation within the recovery timeout.
struct RecoveryOverdue {
  uint64_t generation = 0;
  uint64_t late = 0;  // ranks that neither joined nor reported
  bool operator==(const RecoveryOverdue&) const = default;
};

// Every rank joined the generation.
struct Rejoined {
  uint64_t generation = 0;
  double after_fault_s = 0;
  uint64_t recomputed_steps = 0;
  bool operator==(const Rejoined&) const = default;
};

// The job is back at the step it had reached when the fault came.
struct Recovered {
  uint64_t back_at_step = 0;
  double after_fault_s = 0;
  bool operator==(const Recovered&) const = default;
};

// A rank moves off a suspect device at the boundary step.
struct MigrationStarted {
  uint32_t device = 0;
  int64_t rank = -1;
  uint64_t boundary_step = 0;
  bool operator==(const MigrationStarted&) const = default;
};

// Every rank sat in one step past the step timeout.
struct Stalled {
  int64_t step = 0;
  double seconds = 0;
  std::string note;
  bool operator==(const Stalled&) const = default;
};

// ---- the control plane's connections ------------------------------------------

// A node agent connected (node_joined), its connection closed (node_lost),
// or, in a node agent's own journal, it joined the root (joined_root).
struct NodeEvent {
  Event kind = Event::node_joined;
  uint32_t node = 0;
  bool operator==(const NodeEvent&) const = default;
};

// A message that could not be read; from a worker (device) or a node agent
// (node), or the root's (neither).
struct BadMessage {
  std::optional<uint32_t> device, node;
  std::string error;
  nlohmann::json message;  // as received (null: not kept)
  bool operator==(const BadMessage&) const = default;
};

// A connection refused before its greeting was accepted.
struct RefusedConnection {
  std::string reason;
  nlohmann::json message;  // the greeting as received (null: not kept)
  bool operator==(const RefusedConnection&) const = default;
};

// Environment variables a node agent would not pass to a worker.
struct RefusedEnv {
  uint32_t device = 0;
  std::vector<std::string> names;
  bool operator==(const RefusedEnv&) const = default;
};

// The root told a node agent to go, and the code it leaves with.
struct Goodbye {
  int64_t code = 0;
  std::string reason;
  bool operator==(const Goodbye&) const = default;
};

// A node agent lost its root.
struct RootLost {
  bool operator==(const RootLost&) const = default;
};

nlohmann::json encode(const Start& r);
nlohmann::json encode(const Fault& r);
nlohmann::json encode(const Health& r);
nlohmann::json encode(const RecoveryStarted& r);
nlohmann::json encode(const Scheduler& r);
nlohmann::json encode(const Readmit& r);
nlohmann::json encode(const StorageFailed& r);
nlohmann::json encode(const End& r);
nlohmann::json encode(const JobEnded& r);
nlohmann::json encode(const Resumed& r);
nlohmann::json encode(const StopRequested& r);
nlohmann::json encode(const Numerics& r);
nlohmann::json encode(const Launch& r);
nlohmann::json encode(const Validated& r);
nlohmann::json encode(const ProcessExit& r);
nlohmann::json encode(const Assigned& r);
nlohmann::json encode(const RecoveryOverdue& r);
nlohmann::json encode(const Rejoined& r);
nlohmann::json encode(const Recovered& r);
nlohmann::json encode(const MigrationStarted& r);
nlohmann::json encode(const Stalled& r);
nlohmann::json encode(const NodeEvent& r);
nlohmann::json encode(const BadMessage& r);
nlohmann::json encode(const RefusedConnection& r);
nlohmann::json encode(const RefusedEnv& r);
nlohmann::json encode(const Goodbye& r);
nlohmann::json encode(const RootLost& r);

// monostate: a kind this build does not know (Event::unknown).
using Record = std::variant<std::monostate, Start, Fault, Health, RecoveryStarted, Scheduler, Readmit,
                            StorageFailed, End, JobEnded, Resumed, StopRequested, Numerics, Launch, Validated,
                            ProcessExit, Assigned, RecoveryOverdue, Rejoined, Recovered, MigrationStarted,
                            Stalled, NodeEvent, BadMessage, RefusedConnection, RefusedEnv, Goodbye, RootLost>;

struct Line {
  Event event = Event::unknown;
  double t = 0;
  Record record;
};

// One line read: its kind, time and record. Throws sigma::Error(invalid_argument) saying "FIELD: why"
// ("(line)" for a line that is not an object): no event or t, or a field
// of a typed kind missing or of another type. Fields a writer adds later
// are read past.
Line decode(const nlohmann::json& j);

}  // namespace sigma::journal
