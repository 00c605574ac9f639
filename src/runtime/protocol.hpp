// The agent protocol: every message that passes between sigmarun's agent and
// its workers, and between the root agent and the agents of other hosts,
// defined once. Each kind is a struct; on the wire it is one JSON object per
// line (see Channel) with a "type" naming the kind. encode() writes one;
// decode_*() reads one and throws Error(invalid_argument) naming the kind
// and the field when a message is malformed, so a bad message never becomes
// a silent default.
//
// Versioning: the first message on a connection (Hello from a worker,
// NodeHello from another host's agent) carries kVersion. The agent refuses a
// peer of another version by name (refusal()), and tells a worker why
// (Goodbye). Within a version, fields are only added, and readers ignore
// fields they do not know.
//
// Thread-safety: the functions are pure; call them from any thread.
#pragma once

#include "runtime/restore_tier.hpp"

#include <sigma/hal.h>
#include <sigma/error.hpp>
#include <sigma/replica_placement.hpp>

#include <nlohmann/json.hpp>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <variant>
#include <vector>

namespace sigma::runtime::protocol {

// 1 was the untyped protocol before this file; 2 names every field.
inline constexpr uint32_t kVersion = 2;

// ---- worker -> agent -------------------------------------------------------

// The first message: which device the worker runs on and how its
// admission checks (self-test, collective probe) went.
struct Hello {
  uint32_t version = kVersion;
  uint32_t device = 0;
  int64_t pid = 0;
  bool self_test_passed = false;
  std::string self_test_detail;
  // The token the agent gave this launch (SIGMA_WORKER_TOKEN): the greeter
  // is the process it started, not whoever reached the socket first.
  std::string token{};
};

// Liveness and telemetry, every heartbeat interval. `step` is the step the
// worker is in (-1 before the first); `step_done` once that step's own work
// is finished (in step_end). A failed telemetry read is `telemetry_error`
// (its status and message), never a made-up sample.
struct Heartbeat {
  int64_t step = -1;
  bool step_done = false;
  std::vector<hal_telemetry_sample_t> telemetry;
  hal_status_t telemetry_status = HAL_OK;
  std::string telemetry_error;
};

// An assignment was carried out: the communicator works and the state is
// restored at `index`. Times in seconds.
struct Joined {
  uint64_t generation = 0;
  uint32_t rank = 0;
  uint64_t index = 0;
  RestoreTier restore = RestoreTier::none;
  double comm_s = 0, probe_s = 0, restore_s = 0;
};

// A training step finished, and how long it took.
// Optional (added in version 2, absent from older workers): what the
// training loop measured, for the progress line and the report.
struct StepDone {
  uint64_t step = 0;
  double seconds = 0;
  std::optional<double> loss{};  // the step's loss (mean over ranks), when the worker says
  uint64_t tokens = 0;           // tokens the whole job trained on in the step; 0: not said
  double flops = 0;              // model FLOPs of the step, whole job; 0: not said
  double peak_flops = 0;         // the job's devices' peak FLOP/s, for MFU; 0: not said
  std::string note{};            // a numerics decision worth reporting ("skipped: ..."); empty: none
};

// A memory-tier snapshot of `index` is held (own and the neighbour's replica).
struct Snapshotted {
  uint64_t index = 0;
};

// A disk checkpoint of `index` is committed.
struct Checkpointed {
  uint64_t index = 0;
};

// The worker's communicator failed: it asks for a new assignment and says
// which snapshots and checkpoints it holds. `code` is the failure's code
// (none: a failure libsigma did not report, such as a C caller's own), on
// the wire its name (sigma::code_name: "device_lost", ...; "unknown" for
// none); `reason` its message.
// `replica` is every step it holds a replica of; `replicas_of` the same by
// the rank whose state it is (added in version 2's memory-tier placement;
// absent from older workers, whose replicas are their ring predecessor's).
struct RecoverRequest {
  std::optional<Code> code;
  std::string reason;
  uint64_t generation = 0;
  std::vector<uint64_t> own, replica, disk;
  std::optional<std::map<uint32_t, std::vector<uint64_t>>> replicas_of{};
};

// The worker's loop is over after `steps` steps.
struct Done {
  uint64_t steps = 0;
};

// The disk checkpoint of `index` could not be written (a full, read-only or
// missing folder): a storage incident, not a device fault; training goes on
// with the memory tier.
struct StorageFailed {
  uint64_t index = 0;
  std::string reason;
};

// The worker cannot run the job as assigned, and running it again would not
// help (its memory tier does not fit the host): the job ends unrecoverable
// with `reason`, and the worker waits for the goodbye.
struct Refused {
  std::string reason;
};

// Contained recovery: this rank carried out the Reform of `epoch` (its
// data-parallel groups are re-formed over the live set; a rejoining rank
// has taken its donor's state).
struct Reformed {
  uint64_t epoch = 0;
};

using WorkerMessage = std::variant<Hello, Heartbeat, Joined, StepDone, Snapshotted, Checkpointed,
                                   RecoverRequest, Done, StorageFailed, Refused, Reformed>;

// ---- agent -> worker -------------------------------------------------------

// Join generation `generation` as `rank` of `world` and restore the state at
// `index` from `restore`: none (a fresh start), memory (the memory tier;
// `handoff` pairs (holder, receiver): the holder sends its replica of the
// receiver's rank), or disk.
// Optional (absent: the ring, one replica, no memory check): `domains`, the
// failure domain of each rank of the new world, from which every rank
// places its replicas (checkpoint::ReplicaPlacement::across); `replicas`,
// how many (1 or 2); `host_ranks`, how many ranks of the new world share
// this rank's host, for the check that their memory tiers fit it.
// The replicas (absent without a layout): `replica_of`, the data-parallel
// replica of each rank of the world; `epoch` and `live`, the live set of
// replicas the rank starts in; `contained`, whether a fault stops only its
// replica (Reforms follow) or every rank (the exact round). A spare taking a rank of a stopped replica
// is assigned with restore `peer`: it takes its state in the hand-off a
// Reform announces.
struct Assign {
  uint32_t rank = 0, world = 0;
  uint64_t generation = 0;
  RestoreTier restore = RestoreTier::none;
  uint64_t index = 0;
  std::vector<std::pair<uint32_t, uint32_t>> handoff;
  // memory: (source, holder) for each survivor whose surviving holder
  // under this assignment's placement lacks its snapshot `index` (the
  // fault cut the exchange that was bringing it): the source sends it
  // before the replaced ranks' states are handed over (absent: none).
  std::vector<std::pair<uint32_t, uint32_t>> refresh{};
  std::vector<uint32_t> domains{};
  uint32_t replicas = 1;
  uint32_t host_ranks = 0;
  std::vector<uint32_t> replica_of{};
  uint64_t epoch = 0;
  std::vector<uint32_t> live{};
  bool contained = false;  // the agent contains faults to their replica (absent: false)
};

// Where the sessions of an assignment keep their replicas: across its
// domains, or on the ring when it declares none. The agent plans refreshes
// with the same placement.
checkpoint::ReplicaPlacement replica_placement(const Assign& a);

// Abort the communicator now (a peer failed).
struct Abort {
  std::string reason;
};

// Leave the job (the device is being retired).
struct Retire {
  std::string reason;
};

// Stop at the boundary after `step` (a migration).
struct StopAfter {
  int64_t step = -1;
};

// The job is over for this worker (or it was refused), and why.
struct Goodbye {
  std::string reason;
};

// Contained recovery: the live set of replicas changes to `live`, as epoch
// `epoch`. Without a boundary at once: the data-parallel collective in
// flight is aborted, the groups re-form over `live` and the step runs
// again, the live replicas taking over the micro-batches of those out.
// With one, a hand-off: at the end of step `boundary` each rank of replica
// `donor` starts streaming its state, then the reduced result of each
// later data-parallel exchange, to its counterparts in the `rejoining`
// replicas, which replay those steps; the live set is unchanged until the
// rejoin (`live` names the set they will rejoin). With `rejoin` as well:
// at the end of step `boundary` the stream stops and the groups re-form
// over `live`. A later epoch supersedes one not carried out yet.
struct Reform {
  uint64_t epoch = 0;
  std::vector<uint32_t> live;
  std::vector<uint32_t> rejoining{};
  std::optional<uint32_t> donor{};
  std::optional<uint64_t> boundary{};
  bool rejoin = false;
  // A hand-off: every rank's failure domain in the world it makes (the
  // spares sit elsewhere), from which every rank places its memory tier's
  // replicas again. Absent: unchanged.
  std::vector<uint32_t> domains{};
};

using AgentMessage = std::variant<Assign, Abort, Retire, StopAfter, Goodbye, Reform>;

// ---- another host's agent -> root ------------------------------------------

// The first message of a node agent.
// `rack`: the host's rack, as it knows it (optional: empty, unknown).
struct NodeHello {
  uint32_t version = kVersion;
  uint32_t node = 0;
  int64_t pid = 0;
  std::string rack{};
};

struct Launched {
  uint32_t device = 0;
  int64_t pid = 0;
};

// How a worker process ended, typed: decisions read `how` and `code`, never
// the words; describe() gives the words the journal and the report show.
struct ProcessEnd {
  enum class How : uint8_t {
    exited,       // it returned or called exit: `code` is its status
    signalled,    // a signal ended it: `code` is the signal
    lost,         // its host's agent is gone: `code` is that host's node
    not_started,  // it could not be started: `words` says why
    unknown,      // a peer that did not say (`words` holds what it said)
  };
  How how = How::unknown;
  int code = 0;
  std::string words;  // for `not_started` and `unknown`

  // From waitpid()'s status.
  static ProcessEnd of_wait_status(int status);
  static ProcessEnd lost_with_node(uint32_t node) { return {How::lost, static_cast<int>(node), {}}; }
  static ProcessEnd not_started(std::string why) { return {How::not_started, 0, std::move(why)}; }
  bool exited_cleanly() const { return how == How::exited && code == 0; }
  // "exited with status 3", "killed by signal Killed", "lost with its node
  // agent 1", "could not start: ...".
  std::string describe() const;
};

// A worker of that host ended, and how. On the wire: "how" and "code", and
// "status" (describe()) for a reader of the journal; a node that sends only
// "status" gives How::unknown.
struct Exited {
  uint32_t device = 0;
  ProcessEnd end;
};

using NodeMessage = std::variant<NodeHello, Launched, Exited>;

// ---- root -> another host's agent ------------------------------------------

struct Spawn {
  uint32_t device = 0;
  std::vector<std::pair<std::string, std::string>> env;
};

struct Kill {
  uint32_t device = 0;
  int signal = 9;
};

// The job ended with exit code `code`, or this node agent was refused
// (`reason`; the root sends a worker's Goodbye, read here as code 4).
struct NodeGoodbye {
  int code = 0;
  std::string reason;
};

using RootMessage = std::variant<Spawn, Kill, NodeGoodbye>;

// ---- encoding --------------------------------------------------------------

nlohmann::json encode(const WorkerMessage& m);
nlohmann::json encode(const AgentMessage& m);
nlohmann::json encode(const NodeMessage& m);
nlohmann::json encode(const RootMessage& m);

// Each throws Error(invalid_argument) "protocol: KIND.FIELD: ..." for a
// message of an unknown kind or with a missing or mistyped field.
WorkerMessage decode_worker(const nlohmann::json& j);
AgentMessage decode_agent(const nlohmann::json& j);
NodeMessage decode_node(const nlohmann::json& j);
RootMessage decode_root(const nlohmann::json& j);

// The first message on a connection to the agent: a worker's or a node
// agent's greeting.
using Greeting = std::variant<Hello, NodeHello>;
Greeting decode_greeting(const nlohmann::json& j);

// Why a peer that speaks `version` is refused, or nullopt when it speaks
// this one.
std::optional<std::string> refusal(uint32_t version);

}  // namespace sigma::runtime::protocol
