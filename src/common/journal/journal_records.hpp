// The incident journal's lines (JOB_DIR/incidents.jsonl): one JSON object
// per line, "event" naming its kind and "t" the seconds since the agent
// started. One definition: the agent writes these, sigma-report and
// `sigma-sim --replay` read them. Names and fields are the file format:
// kinds and fields are added, never renamed or retyped, so every journal
// written so far still reads (tests/data/ keeps one). The kinds that a
// reader decides on have a record type; the others are written through
// line() with their fields.
//
// Thread-safety: pure functions.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>

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

// A line of a kind without a record type: {"event": name(e)} and `fields`.
nlohmann::json line(Event e, nlohmann::json fields = nlohmann::json::object());

// The job's shape, first line of every journal.
struct Start {
  std::string job_id;
  uint32_t nproc = 0, spares = 0, nnodes = 1, nodes_per_group = 0, min_world = 1;
  uint64_t snapshot_every = 1, checkpoint_every = 0;
  bool proactive_migration = true, allow_shrink = false;
  std::string vendor, store, agent, vendor_options;
  nlohmann::json worker = nlohmann::json::array();  // program and arguments
};

// A device's worker lost (crashed, hung, stuck, its node gone).
struct Fault {
  uint32_t device = 0;
  int64_t rank = -1;  // -1: a device that held none (a spare)
  std::string phase, cause;
  double detected_after_s = 0;
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
};

struct RecoveryStarted {
  std::string cause;
  std::optional<uint64_t> reached_step;
};

// A scheduler action ("assign", "replace", "restore", "migrate", ...).
struct Scheduler {
  std::string action, reason;
  std::optional<uint32_t> device, rank, to_device;
  std::string tier;         // restore only
  uint32_t world_size = 0;  // 0: not said
};

// A device whose worker crashed, validated again.
struct Readmit {
  uint32_t device = 0;
  std::string cause;
  uint32_t time = 0, of = 0;  // the time-th readmission of at most `of`
};

// A disk checkpoint that could not be written (a storage incident).
struct StorageFailed {
  uint32_t device = 0;
  int64_t rank = -1;
  uint64_t index = 0;
  std::string reason;
};

nlohmann::json encode(const Start& r);
nlohmann::json encode(const Fault& r);
nlohmann::json encode(const Health& r);
nlohmann::json encode(const RecoveryStarted& r);
nlohmann::json encode(const Scheduler& r);
nlohmann::json encode(const Readmit& r);
nlohmann::json encode(const StorageFailed& r);

using Record =
    std::variant<std::monostate, Start, Fault, Health, RecoveryStarted, Scheduler, Readmit, StorageFailed>;

struct Line {
  Event event = Event::unknown;
  double t = 0;
  Record record;  // monostate for a kind without a record type
};

// One line read: its kind, time and, for the kinds with a record type,
// the record. Throws sigma::Error(invalid_argument) saying "FIELD: why"
// ("(line)" for a line that is not an object): no event or t, or a field
// of a typed kind missing or of another type. Fields a writer adds later
// are read past.
Line decode(const nlohmann::json& j);

}  // namespace sigma::journal
