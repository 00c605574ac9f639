// sigma/runtime.hpp -- the worker's side of `sigmarun`.
//
// A worker started by sigmarun creates one Session. The session connects to
// the agent, loads the HAL plugin for its device, runs the device's
// self-test, then waits to be given a rank (spares wait here, warm). It
// sends heartbeats and telemetry from its own thread, reports each step's
// time, keeps the registered state in the memory tier (own snapshot plus a
// replica of the previous rank's, exchanged through the HAL) and, when the
// agent reports a failure elsewhere, aborts the communicator so the training
// thread leaves its collective at once. The training loop then calls
// recover(): the session builds the next communicator, restores the state
// (from memory, or from disk when memory cannot serve) and says which step
// to run next.
//
//   sigma::runtime::Session s;                 // from sigmarun's environment
//   s.set_state(views);                        // what to snapshot and restore
//   s.add_state_item({"policy", 4096, save, restore});  // small non-tensor state
//   sigma::runtime::Loop loop;
//   loop.total_steps = total;
//   loop.step = [&](uint64_t step, uint64_t batch) {
//     ... compute on data batch `batch`; collectives on s.comm() ...
//     return sigma::runtime::StepOutcome{};    // or one with a rollback
//   };
//   loop.on_generation = [&](uint64_t next) { ... groups of this generation ... };
//   auto done = s.run(loop);                   // nullopt: retired, exit
//
// run() is join / step_begin / step_end / recover / rollback / finish in a
// loop, with the data windows a rollback skips; a program with its own loop
// calls them itself.
//
// Step indices: step_end(k) snapshots the state after step k, i.e. k + 1
// steps done; join()/recover() return the number of steps done in the state
// they restored, which is the next step to run.
//
// Thread-safety: every member is for the training thread, except that the
// session's own thread runs heartbeats and aborts. Not copyable.
#pragma once

#include <sigma/export.hpp>

#include <sigma/checkpoint.hpp>
#include <sigma/error.hpp>
#include <sigma/hal.hpp>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace sigma::runtime {

struct SIGMA_EXPORT SessionOptions {
  std::string agent_socket;       // SIGMA_AGENT_SOCKET
  uint32_t device = 0;            // SIGMA_DEVICE: the agent's id for this device
  std::string job_dir;            // SIGMA_JOB_DIR
  std::string plugin = "cpu";     // SIGMA_HAL_PLUGIN: name or path
  std::string plugin_options;     // SIGMA_HAL_OPTIONS
  std::string store;              // SIGMA_STORE: file:///... or redis://host:port
  double heartbeat_s = 0.1;       // SIGMA_HEARTBEAT_S
  uint64_t snapshot_every = 1;    // SIGMA_SNAPSHOT_EVERY: memory-tier period in steps
  uint64_t checkpoint_every = 0;  // SIGMA_CHECKPOINT_EVERY: disk period in steps; 0 = never
  size_t snapshot_keep = 2;       // SIGMA_SNAPSHOT_KEEP: memory-tier snapshots kept (own and of each replica)
  // SIGMA_TIER_MEMORY_BYTES: the host memory its ranks' memory tiers may
  // take; a job whose tiers need more is refused before it starts, with the
  // numbers. 0: the host's available memory when the session starts.
  uint64_t tier_memory_bytes = 0;
  uint32_t checkpoint_base_every = 4;  // SIGMA_CHECKPOINT_BASE_EVERY: a full disk base every K checkpoints
  uint32_t checkpoint_keep = 4;        // SIGMA_CHECKPOINT_KEEP: newest disk checkpoints kept
  bool checkpoint_async = false;       // SIGMA_CHECKPOINT_ASYNC=1: saves written in the background
  // Bounds on waiting for peers; a peer that overruns one is hung.
  double comm_timeout_s = 30;        // SIGMA_COMM_TIMEOUT_S: communicator creation
  double probe_timeout_s = 30;       // SIGMA_PROBE_TIMEOUT_S: the new communicator's one-element probe
  double collective_timeout_s = 60;  // SIGMA_COLLECTIVE_TIMEOUT_S: the session's host collectives
  // SIGMA_JOB_SECRET: when set, every message to and from the agent is
  // authenticated with the job's key (sigmarun sets it for jobs on several
  // hosts).
  std::string secret;

  // Reads the variables above; throws Error(invalid_argument) naming the
  // variable that is missing or malformed.
  static SessionOptions from_env();
};

// What a training loop may tell the agent about a step, for its progress
// line and the job's report (report.json "series", report.html). All
// optional; rank 0's is the one shown.
struct StepReport {
  std::optional<double> loss{};  // the step's loss, mean over ranks (NaN allowed)
  uint64_t tokens = 0;           // tokens the whole job trained on in this step
  double flops = 0;              // model FLOPs of this step, whole job (for MFU)
  double peak_flops = 0;         // peak FLOP/s of the job's devices, as the worker measured or knows it
  std::string note{};            // a numerics decision worth a line in the report ("skipped: ...")
};

// A non-tensor piece of the state (a policy, an expert placement, a data
// cursor), kept by name with the tensors in every memory-tier snapshot and
// disk checkpoint. `save` gives its bytes when a snapshot or checkpoint is
// taken (not every step); `restore` gets back the bytes of the state the
// session restored (join or recover of a saved state, rollback), before
// run()'s hooks are called. Both run on the training thread.
struct StateItem {
  std::string name;
  uint64_t max_bytes = 0;  // the most `save` may return: the snapshots reserve it
  std::function<std::string()> save;
  std::function<void(std::string_view)> restore;
  // A rollback leaves it as it is (a policy that must remember the spike it
  // rolled back) instead of taking the snapshot's bytes.
  bool kept_on_rollback = false;
};

// A rollback every rank decided alike (the guardrails' loss-spike answer):
// the state goes back to memory-tier snapshot `to_index` (steps done) and
// the data batches of steps [skip_begin, skip_end), as those steps were
// numbered, are never trained on again.
struct Rollback {
  uint64_t to_index = 0;
  uint64_t skip_begin = 0, skip_end = 0;
  std::string reason;
};

// What one step of run()'s loop decided (every rank the same).
struct StepOutcome {
  StepReport report{};                 // a finished step's figures for the agent
  std::optional<Rollback> rollback{};  // go back instead of finishing the step
};

// run()'s loop: the step and the hooks around it. Only `step` is required.
struct Loop {
  uint64_t total_steps = 0;
  // One step on data batch `batch`: the step's index moved past the
  // windows rollbacks skipped (Session::batch_of).
  std::function<StepOutcome(uint64_t step, uint64_t batch)> step;
  // After join and after each recovery: a new generation (rank, world,
  // communicator), the state and items restored; `next` is the step to run.
  std::function<void(uint64_t next)> on_generation;
  // After a rollback: the snapshot and the items not kept are back, the
  // window skipped; `next` is the step to run.
  std::function<void(uint64_t next, const Rollback& rollback)> on_rollback;
  // After step_end of `step`: reported, snapshotted and saved when due.
  std::function<void(uint64_t step)> on_step_done;
};

// Contained recovery's layout (sigmarun --recovery contained): the world is
// `count` data-parallel replicas of `size` consecutive ranks (the
// model-parallel group: EP x PP); rank r is at `position` r mod size of
// replica r / size. `live` are the replicas stepping now (a fault stops its
// replica only), numbered by `epoch`. Without contained recovery: one
// replica, the whole world.
struct ReplicaLayout {
  uint32_t count = 1;
  uint32_t size = 0;
  uint32_t index = 0;     // this rank's replica
  uint32_t position = 0;  // this rank's place in it
  uint64_t epoch = 0;
  std::vector<uint32_t> live{0};
  bool degraded() const { return live.size() < count; }
};

class SIGMA_EXPORT Session {
 public:
  // True when this process was started by sigmarun (SIGMA_AGENT_SOCKET set).
  static bool under_agent() noexcept;

  // Connects, loads the plugin, runs self_test and says hello. A failing
  // self-test is reported to the agent (which cordons the device) and thrown
  // as Error(unavailable). Throws Error(unavailable) when the agent cannot
  // be reached.
  explicit Session(SessionOptions options = SessionOptions::from_env());
  ~Session();
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  // The state the memory tier and disk checkpoints hold: host memory views
  // that stay valid (same addresses and sizes) for the session's life.
  // Before join. The name "sigma.items" is the session's own.
  void set_state(std::vector<checkpoint::TensorView> views);
  // A non-tensor item of the state, before join. Throws
  // Error(invalid_argument) for a name already taken, a missing callback,
  // or after join; `save` returning more than `max_bytes` throws
  // Error(invalid_argument) from the step_end that takes the snapshot.
  void add_state_item(StateItem item);

  // The data batch of `step`: the step's index moved past the windows
  // rollbacks skipped (they travel with the state, so a replacement skips
  // them too). Pure.
  uint64_t batch_of(uint64_t step) const;
  // The skipped windows, [begin, end) in batches, sorted and merged.
  const std::vector<std::pair<uint64_t, uint64_t>>& skipped_batches() const noexcept;

  // Called on the session's thread each time it aborts its communicator (a
  // peer failed): a job with communicators of its own (sigma::parallel's
  // Groups) aborts them here, so no collective waits out its timeout. Keep
  // it short; it must not call the session.
  void on_abort(std::function<void()> hook);

  // Blocks until the agent assigns a rank, builds the communicator, takes
  // the first snapshot (or restores, for a spare that replaces a rank) and
  // returns the next step to run. Throws Error(aborted) when the agent ends
  // the job before this device is needed (a spare never used).
  uint64_t join();
  // For a program that must know its rank before it can say what its state
  // is (torch.distributed's init_process_group comes before the model):
  // blocks until the agent assigns a rank, then returns; join() carries out
  // the rest. At the job's fresh start the communicator is built and probed
  // here, so the program's own collectives may run on comm() before join()
  // (every rank starts alike). Any other worker (a replacement, a spare,
  // a resume from disk) has its communicator built by join(): its peers are
  // in their recovery, restore_pending() is true, and nothing may run on
  // comm() until join(). State items may still be added until join().
  // Throws as join() does; Error(invalid_argument) after join or a second
  // time.
  void wait_for_rank();
  // True between wait_for_rank() and join() when the communicator waits for
  // join() (see wait_for_rank). Training thread.
  bool restore_pending() const noexcept;

  uint32_t rank() const noexcept;
  uint32_t world_size() const noexcept;
  uint64_t generation() const noexcept;
  hal::Communicator& comm();
  const hal::PluginPtr& plugin() const noexcept;

  // The step in flight, for the heartbeats. With contained recovery also
  // a collective over the replica's ranks (a tiny all-reduce): every one
  // starts the step in the same epoch of the live set, carrying out a
  // Reform another already has. Throws the replica group's errors.
  void step_begin(uint64_t step);
  // Reports the step's time, snapshots into the memory tier when due (a
  // collective), saves a disk checkpoint when due. Throws Error(aborted)
  // when the agent asked the job to stop after this step (a migration).
  void step_end(uint64_t step);
  // The same, with the step's figures for the progress line and the report.
  void step_end(uint64_t step, const StepReport& report);
  // True when the disk checkpoint of `step` is due (step_end saves it).
  bool should_checkpoint(uint64_t step) const noexcept;
  // True once the agent has asked for a stop at a step boundary.
  bool should_migrate() const noexcept;

  // A rollback every rank decided alike (the guardrails' loss-spike
  // answer): copies this rank's own memory-tier snapshot `index` (steps
  // done) back into the state and forgets the snapshots newer than it, own
  // and replicas. Items kept on rollback and the skipped windows stay as
  // they are now; the others get the snapshot's bytes. Returns `index`, the
  // next step to run. Not collective: no byte moves between ranks. Throws
  // Error(data_loss) when this rank no longer holds that snapshot (keep
  // more with SIGMA_SNAPSHOT_KEEP).
  uint64_t rollback(uint64_t index);
  // The same, and the batches of steps [skip_begin, skip_end) (numbered as
  // before the rollback) are skipped from now on.
  uint64_t rollback(const Rollback& r);

  // Collectives on host memory over comm(), staged through one device
  // buffer the session keeps for the generation (nothing allocated per
  // call), bounded by `timeout` (default: collective_timeout_s). Errors are
  // the communicator's: recover() after one. all_gather: `data` holds
  // world × `count` elements, this rank's at rank × count.
  void all_reduce(void* data, uint64_t count, hal_dtype_t dtype, hal_reduce_op_t op = HAL_REDUCE_SUM,
                  std::optional<std::chrono::nanoseconds> timeout = std::nullopt);
  void broadcast(void* data, uint64_t count, hal_dtype_t dtype, uint32_t root,
                 std::optional<std::chrono::nanoseconds> timeout = std::nullopt);
  void all_gather(void* data, uint64_t count, hal_dtype_t dtype,
                  std::optional<std::chrono::nanoseconds> timeout = std::nullopt);

  // ---- contained recovery (docs/sigmarun.md) ----
  // The layout of the assignment in force; one replica of the whole world
  // without contained recovery. Training thread.
  const ReplicaLayout& replicas() const noexcept;
  // This rank's replica's ranks (the model-parallel group: expert and
  // pipeline exchanges go here), and this position's ranks in every live
  // replica (the data-parallel group). Both are comm() without contained
  // recovery. Valid until the next join, recover or re-form. While a
  // replica is out the world is not whole and comm() throws
  // Error(aborted). Training thread.
  hal::Communicator& replica_comm();
  hal::Communicator& data_parallel_comm();
  // The micro-batches of a step of `total` that this replica computes, in
  // order: micro-batch m goes to the (m mod |live|)-th live replica, so each
  // is computed once whichever replicas are live and the global batch and
  // its data are kept (the sums' order is the only difference). All of
  // them without contained recovery. Pure.
  std::vector<uint32_t> microbatches(uint32_t total) const;
  // The step's data-parallel exchange: an all-reduce of host memory over
  // data_parallel_comm(), then (contained recovery) a vote over the
  // replica: every rank of it learns whether every one's exchange held. A
  // step must apply nothing before its last such exchange returns. When a
  // replica went out during it (the agent re-formed the live set) the step
  // is void: the groups re-form over the live replicas and Error(aborted)
  // is thrown with take_void_step() true: run the same step again (run()
  // does), the micro-batches now shared among fewer replicas. Any other
  // failure is thrown as all_reduce's.
  void data_parallel_all_reduce(void* data, uint64_t count, hal_dtype_t dtype,
                                hal_reduce_op_t op = HAL_REDUCE_SUM,
                                std::optional<std::chrono::nanoseconds> timeout = std::nullopt);
  // True once after data_parallel_all_reduce voided the step in flight
  // (nothing of it applied, the groups re-formed): run it again rather
  // than recover. Training thread.
  bool take_void_step() noexcept;

  // After an Error from a collective or step_end: reports what this rank
  // holds, waits for the agent's new assignment, builds the next
  // communicator, restores the agreed state and returns the next step.
  // Throws Error(aborted) when the agent retires this worker (it was moved
  // off a suspect device, or the job is paused) and Error(unavailable)
  // when the agent is gone.
  // `failure` is what failed: its code travels to the agent as it is (a
  // device that reports itself lost is replaced without being waited for).
  uint64_t recover(const Error& failure);
  // The same for a failure known by its code alone (a C caller's status).
  uint64_t recover(Code code, const std::string& reason);
  // For a failure libsigma did not report (the caller's own exception): the
  // agent reads its code as unknown, never from `reason`.
  uint64_t recover(const std::string& reason = {});
  // True once the agent has retired this worker or ended the job: join()
  // and recover() then throw Error(aborted) and the process should exit.
  bool ended() const noexcept;
  // True once the connection to the agent closed: nothing can be
  // recovered, join() and recover() throw Error(unavailable).
  bool agent_gone() const noexcept;

  // The whole loop: join, run `loop.step` for each step from the restored
  // one to `total_steps` with step_begin/step_end around it, carry out the
  // rollbacks it decides (the reason is said with the next finished step's
  // note), recover from a sigma::Error, finish; the hooks are called as
  // Loop says. Returns the steps done, or std::nullopt when the agent
  // retired this worker (a spare never used, or a worker moved off a
  // suspect device). Error(invalid_argument) and Error(not_supported) are
  // mistakes in the program, not failures, and propagate, as do other
  // exceptions and the agent's loss.
  std::optional<uint64_t> run(const Loop& loop);
  // The same with a step that decides nothing.
  std::optional<uint64_t> run(uint64_t total_steps, const std::function<void(uint64_t)>& step_fn);
  // Reports the job done on this rank and waits for the agent's goodbye.
  // Throws Error(aborted) when a peer fails before every rank has finished:
  // this rank's state is then needed to restore the peer's, so call
  // recover() and run the steps from the step it returns, then finish again
  // (run() does).
  void finish(uint64_t steps_done);

 private:
  struct Impl;
  void take_snapshot(uint64_t index);  // step_end's memory snapshot
  std::unique_ptr<Impl> impl_;
};

}  // namespace sigma::runtime
