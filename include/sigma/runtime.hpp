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
//   auto done = s.run(total, [&](uint64_t step) {
//     ... compute; collectives on s.comm() ...
//   });                                        // nullopt: retired, exit
//
// run() is join / step_begin / step_end / recover / finish in a loop; a
// program with its own loop calls them itself.
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

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace sigma::runtime {

struct SIGMA_EXPORT SessionOptions {
  std::string agent_socket;            // SIGMA_AGENT_SOCKET
  uint32_t device = 0;                 // SIGMA_DEVICE: the agent's id for this device
  std::string job_dir;                 // SIGMA_JOB_DIR
  std::string plugin = "cpu";          // SIGMA_HAL_PLUGIN: name or path
  std::string plugin_options;          // SIGMA_HAL_OPTIONS
  std::string store;                   // SIGMA_STORE: file:///... or redis://host:port
  double heartbeat_s = 0.1;            // SIGMA_HEARTBEAT_S
  uint64_t snapshot_every = 1;         // SIGMA_SNAPSHOT_EVERY: memory-tier period in steps
  uint64_t checkpoint_every = 0;       // SIGMA_CHECKPOINT_EVERY: disk period in steps; 0 = never
  size_t snapshot_keep = 2;            // SIGMA_SNAPSHOT_KEEP: memory-tier snapshots kept (own and replica)
  uint32_t checkpoint_base_every = 4;  // SIGMA_CHECKPOINT_BASE_EVERY: a full disk base every K checkpoints
  uint32_t checkpoint_keep = 4;        // SIGMA_CHECKPOINT_KEEP: newest disk checkpoints kept
  bool checkpoint_async = false;       // SIGMA_CHECKPOINT_ASYNC=1: saves written in the background
  double comm_timeout_s = 30;          // how long communicator creation waits for peers
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
  void set_state(std::vector<checkpoint::TensorView> views);

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

  uint32_t rank() const noexcept;
  uint32_t world_size() const noexcept;
  uint64_t generation() const noexcept;
  hal::Communicator& comm();
  const hal::PluginPtr& plugin() const noexcept;

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
  // and replicas. Returns `index`, the next step to run. Not collective: no
  // byte moves between ranks. Throws Error(data_loss) when this rank no
  // longer holds that snapshot (keep more with SIGMA_SNAPSHOT_KEEP).
  uint64_t rollback(uint64_t index);

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

  // The whole loop for the common case: join, run `step_fn(step)` for each
  // step from the restored one to `total_steps` with step_begin/step_end
  // around it, recover from any sigma::Error, finish. Returns the steps
  // done, or std::nullopt when the agent retired this worker (a spare never
  // used, or a worker moved off a suspect device). Other exceptions and
  // the agent's loss propagate.
  std::optional<uint64_t> run(uint64_t total_steps, const std::function<void(uint64_t)>& step_fn);
  // Reports the job done on this rank and waits for the agent's goodbye.
  // Throws Error(aborted) when a peer fails before every rank has finished:
  // this rank's state is then needed to restore the peer's, so call
  // recover() and run the steps from the step it returns, then finish again
  // (run() does).
  void finish(uint64_t steps_done);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace sigma::runtime
