// The worker session's state and the code that sequences it, shared by
// session.cpp (the public calls, the assignment, the control thread) and
// session_contained.cpp (contained recovery's groups and hand-off). Two
// threads: the training thread (every public member) and the session's
// control thread, which owns the agent channel's reading side, sends
// heartbeats with telemetry, and aborts the current communicators when the
// agent says a peer failed. They share the inbox (assignments, re-forms),
// the current communicators (abort only) and a few atomics.
#pragma once

#include <sigma/bootstrap.hpp>
#include <sigma/host_staging.hpp>
#include <sigma/memory_tier.hpp>
#include <sigma/runtime.hpp>

#include "runtime/channel.hpp"
#include "runtime/handoff_stream.hpp"
#include "runtime/protocol.hpp"
#include "runtime/state_items.hpp"
#include "runtime/tier_fit.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <deque>
#include <functional>
#include <mutex>
#include <optional>
#include <thread>
#include <utility>

namespace sigma::runtime {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

inline double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

struct Session::Impl {
  SessionOptions o;
  std::unique_ptr<Channel> ch;
  hal::PluginPtr plugin;
  std::vector<hal_field_id_t> fields;
  std::shared_ptr<bootstrap::Store> store;
  std::mutex comm_mu;
  std::shared_ptr<bootstrap::HalBootstrap> bs;  // guarded by comm_mu (the pointer)
  std::shared_ptr<hal::Communicator> comm;      // guarded by comm_mu (the pointer)
  // Contained recovery's groups (session_contained.cpp): this replica's
  // ranks, and this position's ranks in the live replicas. Null without
  // contained recovery (comm serves both).
  std::shared_ptr<hal::Communicator> replica_comm;  // guarded by comm_mu (the pointer)
  std::shared_ptr<hal::Communicator> dp_comm;       // guarded by comm_mu (the pointer)
  std::shared_ptr<hal::Communicator> handoff_comm;  // guarded by comm_mu: a hand-off's stream
  std::function<void()> on_abort;                   // guarded by comm_mu
  uint32_t rank = 0, world = 0;
  uint64_t generation = 0;
  ReplicaLayout layout;                       // the assignment's replicas (one without contained recovery)
  bool contained = false;                     // the assignment names replicas (their groups are formed)
  bool contain_faults = false;                // ... and the agent contains faults to them (Reforms come)
  uint32_t tier_replicas = 1;                 // the memory tier's copies of each rank's snapshots
  std::optional<protocol::Reform> handoff;    // a hand-off to start at the end of its boundary step
  std::optional<protocol::Reform> rejoin;     // a rejoin to carry out at the end of its boundary step
  std::optional<protocol::Reform> streaming;  // the hand-off in progress
  std::unique_ptr<HandoffSender> sender;      // the donor's stream
  std::unique_ptr<HandoffReceiver> receiver;  // a rejoining rank's stream: it replays
  bool notice_sent = false;                   // the rejoin's notice is in the sender's stream
  std::optional<std::pair<uint64_t, uint64_t>> rejoin_notice;  // receiver: (last step, epoch)
  bool void_step = false;                                      // the step in flight was voided by a re-form
  uint64_t reformed_for = UINT64_MAX;         // the step a re-form at once was last carried out for
  std::vector<checkpoint::TensorView> views;  // the caller's tensors
  StateItems items;                           // ... its non-tensor items and the skipped windows
  std::vector<checkpoint::TensorView> state;  // both: what snapshots and checkpoints hold
  void rebuild_state() {
    state = views;
    state.push_back(items.view());
  }
  uint64_t state_bytes() const {
    uint64_t n = 0;
    for (const auto& v : state) n += v.bytes();
    return n;
  }
  std::unique_ptr<hal::HostStaging> staging;  // the host collectives' buffer, per generation
  uint64_t staging_generation = 0;
  hal::HostStaging& host_staging() {
    if (!staging || staging_generation != generation) {
      staging.reset();
      staging = std::make_unique<hal::HostStaging>(plugin);
      staging_generation = generation;
    }
    return *staging;
  }
  std::chrono::nanoseconds collective_timeout() const {
    return std::chrono::nanoseconds(static_cast<int64_t>(o.collective_timeout_s * 1e9));
  }
  std::unique_ptr<checkpoint::MemoryTier> tier;
  checkpoint::ReplicaPlacement placement = checkpoint::ReplicaPlacement::ring(1);  // this generation's
  uint64_t host_available = 0;  // the host's available memory when the session started
  std::unique_ptr<checkpoint::Engine> engine;
  std::vector<uint64_t> pending_disk;  // saved asynchronously, not yet known durable
  bool resnapshot = false;             // a replacement joined: the next step snapshots
  Clock::time_point step_t0;

  // The control thread's side.
  std::thread control;
  std::atomic<bool> stopping{false};
  std::atomic<bool> agent_gone{false};
  std::atomic<int64_t> current_step{-1};
  std::atomic<bool> in_step_end{false};  // inside step_end: the step's own work is done
  std::atomic<int64_t> stop_after{-1};
  std::atomic<uint64_t> abort_seq{0};  // aborts received so far
  std::atomic<uint64_t> reform_seq{
      0};                        // Reforms at once received so far (they abort the data-parallel group)
  uint64_t assigned_aborts = 0;  // ... when the assignment in force arrived
  // An assignment, retirement or goodbye from the agent, with the number of
  // aborts received before it (a later abort makes an assignment stale).
  struct Command {
    protocol::AgentMessage message;
    uint64_t aborts_before = 0;
  };
  std::mutex inbox_mu;
  std::condition_variable inbox_cv;
  std::deque<Command> inbox;
  std::deque<protocol::Reform> reforms;  // guarded by inbox_mu: contained re-forms not taken yet
  std::atomic<bool> ended{false};

  // Ends what the training thread waits for: a collective (abort) or the
  // creation of the next communicator (its bootstrap is cancelled).
  void abort_comm() {
    std::shared_ptr<hal::Communicator> c, rc, dc, hc;
    {
      std::lock_guard<std::mutex> lk(comm_mu);
      c = comm;
      rc = replica_comm;
      dc = dp_comm;
      hc = handoff_comm;
      if (bs) bs->cancel();
    }
    for (const auto& x : {c, rc, dc, hc})
      if (x) x->abort();
    std::function<void()> hook;
    {
      std::lock_guard<std::mutex> lk(comm_mu);
      hook = on_abort;
    }
    if (hook) hook();
  }

  // A heartbeat: where the training thread is, and the device's telemetry
  // (or why it could not be read).
  protocol::Heartbeat heartbeat() {
    protocol::Heartbeat h;
    h.step = current_step.load();
    h.step_done = in_step_end.load();
    if (fields.empty()) return h;
    try {
      h.telemetry = plugin->read_telemetry(0, fields);
    } catch (const Error& e) {
      h.telemetry_status = to_hal_status(e.code());
      h.telemetry_error = e.what();
    }
    return h;
  }

  void control_loop() {
    auto next_beat = Clock::now();
    while (!stopping) {
      const auto wait = std::chrono::duration_cast<std::chrono::milliseconds>(next_beat - Clock::now());
      auto msg = ch->receive(std::max(std::chrono::milliseconds(0), wait));
      if (ch->closed()) {
        {
          std::lock_guard<std::mutex> lk(inbox_mu);  // waiters read it under the lock
          agent_gone = true;
        }
        abort_comm();
        inbox_cv.notify_all();
        return;
      }
      if (msg) handle(*msg);
      if (Clock::now() >= next_beat) {
        ch->send(protocol::encode(heartbeat()));
        next_beat +=
            std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(o.heartbeat_s));
        if (next_beat < Clock::now()) next_beat = Clock::now();
      }
    }
  }

  void handle(const json& j) {
    protocol::AgentMessage m;
    try {
      m = protocol::decode_agent(j);
    } catch (const Error& e) {
      // A message this worker cannot read: the agent is not the one it was
      // built for. Nothing can be trusted from here on.
      std::fprintf(stderr, "runtime: %s; leaving the job\n", e.what());
      m = protocol::Goodbye{e.what()};
    }
    if (const auto* r = std::get_if<protocol::Reform>(&m)) {
      {
        std::lock_guard<std::mutex> lk(inbox_mu);
        reforms.push_back(*r);
      }
      // At once: the data-parallel exchange in flight (and the world's)
      // has a replica out; the replica's own group goes on.
      if (!r->boundary) abort_for_reform();
      inbox_cv.notify_all();
      return;
    }
    if (std::holds_alternative<protocol::Abort>(m)) {
      {
        // Under the inbox's lock: finish() waits for an abort there too.
        std::lock_guard<std::mutex> lk(inbox_mu);
        ++abort_seq;
      }
      inbox_cv.notify_all();  // first: a rank waiting for a re-form leaves at once
      abort_comm();
      return;
    }
    if (const auto* stop = std::get_if<protocol::StopAfter>(&m)) {
      stop_after = stop->step;
      // Already past the boundary: leave the collective now instead.
      if (current_step.load() > stop->step) abort_comm();
      return;
    }
    const bool leaving = !std::holds_alternative<protocol::Assign>(m);  // retire, goodbye
    {
      // The count and the command change together: finish() reads a
      // goodbye's abort as the goodbye, never as a peer's failure.
      std::lock_guard<std::mutex> lk(inbox_mu);
      if (leaving) ++abort_seq;
      inbox.push_back({std::move(m), abort_seq.load()});
    }
    if (leaving) abort_comm();
    inbox_cv.notify_all();
  }

  Command next_command() {
    std::unique_lock<std::mutex> lk(inbox_mu);
    inbox_cv.wait(lk, [&] { return !inbox.empty() || agent_gone.load(); });
    if (inbox.empty()) throw Error(Code::unavailable, "runtime: the agent is gone");
    Command c = std::move(inbox.front());
    inbox.pop_front();
    return c;
  }

  // A communicator of `size` ranks, this one `r`, that meet through the
  // store under `prefix`. Cancelled (it throws) when an abort arrived after
  // `aborts_before` (or a Reform at once after `reforms_before`), or
  // arrives while it is being built.
  std::shared_ptr<hal::Communicator> make_comm(const std::string& prefix, uint32_t r, uint32_t size,
                                               uint64_t aborts_before,
                                               std::optional<uint64_t> reforms_before = std::nullopt) {
    auto boot = std::make_shared<bootstrap::HalBootstrap>(store, prefix);
    {
      std::lock_guard<std::mutex> lk(comm_mu);
      bs = boot;
    }
    if (aborts_before != abort_seq.load() || (reforms_before && *reforms_before != reform_seq.load()))
      boot->cancel();
    hal_comm_create_args_t ca{};
    ca.struct_size = sizeof(ca);
    ca.rank = r;
    ca.world_size = size;
    ca.bootstrap = boot->table();
    ca.timeout_ns = static_cast<uint64_t>(o.comm_timeout_s * 1e9);
    return std::make_shared<hal::Communicator>(plugin, ca);
  }

  void build_comm(const protocol::Assign& a, uint64_t aborts_before) {
    {
      std::lock_guard<std::mutex> lk(comm_mu);
      comm.reset();
      replica_comm.reset();
      dp_comm.reset();
    }
    rank = a.rank;
    world = a.world;
    generation = a.generation;
    auto c = make_comm("gen-" + std::to_string(generation) + "/", rank, world, aborts_before);
    std::lock_guard<std::mutex> lk(comm_mu);
    comm = std::move(c);
  }

  // ---- contained recovery (session_contained.cpp) ----
  void set_layout(const protocol::Assign& a);
  void form_groups(uint64_t aborts_before);
  uint64_t join_replica(const protocol::Assign& a, uint64_t aborts_before);
  std::optional<protocol::Reform> next_handoff(uint64_t epoch);
  void abort_for_reform();
  bool reform_now(uint64_t step);
  bool take_reform(uint64_t step, std::chrono::nanoseconds wait);
  void maybe_hand_off(uint64_t step);
  void checkpoint(uint64_t index);
  void take_boundaries();
  void start_handoff(const protocol::Reform& r, uint64_t reforms_before);
  void finish_rejoin(const protocol::Reform& r, uint64_t reforms_before);
  void rejoiner_step_end(uint64_t step);
  void rejoin_now();
  void end_handoff();
  void replay_exchange(void* data, uint64_t bytes, uint64_t step);
  void form_epoch(const protocol::Reform& r, uint64_t aborts_before, std::optional<uint64_t> reforms_before);
  void check_same_step(uint64_t step);
  bool vote(bool ok);
  void agree_epoch(uint64_t step);
  std::string epoch_prefix(uint64_t epoch) const {
    return "gen-" + std::to_string(generation) + "/e-" + std::to_string(epoch) + "/";
  }

  // Tells the agent which asynchronous saves became durable (or that the
  // disk failed); with `wait`, first waits for those in flight. The agent
  // plans restores only from checkpoints that exist.
  void settle_disk(bool wait) {
    if (!engine || pending_disk.empty()) return;
    try {
      for (const auto& r : wait ? engine->wait() : engine->poll()) {
        pending_disk.erase(std::remove(pending_disk.begin(), pending_disk.end(), r.step), pending_disk.end());
        ch->send(protocol::encode(protocol::Checkpointed{r.step}));
      }
    } catch (const Error& e) {
      // The disk failed, not the device: the memory tier still holds the
      // state, so training goes on. The engine is made again at the next
      // checkpoint (the folder may come back).
      engine.reset();
      ch->send(protocol::encode(protocol::StorageFailed{pending_disk.back(), e.what()}));
      pending_disk.clear();
    }
  }

  // The disk checkpoints this rank can restore: every step whose shard of
  // this rank is committed (its manifest in place), whichever process wrote
  // it, that it can read: the step is whole (a global manifest) or was
  // saved on this world size. A replacement holds what its predecessor
  // saved, and a shard still being written when a fault struck is not held:
  // the folder is the truth, not this process's memory of its own saves.
  // Each rank speaks for its own shard only (the agent takes the steps every
  // rank holds), so a rank that reports before a slower peer has finished
  // the step still counts the shard it wrote.
  std::vector<uint64_t> disk_held() const {
    std::vector<uint64_t> out;
    try {
      for (const auto& st : checkpoint::list_steps(o.job_dir + "/checkpoints/sigmarun"))
        if ((st.complete || st.world == world) && std::binary_search(st.ranks.begin(), st.ranks.end(), rank))
          out.push_back(st.step);
    } catch (const Error&) {
      // An unreadable folder holds nothing this rank could restore.
    }
    std::sort(out.begin(), out.end());
    return out;
  }

  // Disk checkpoints after the step the job goes back to describe steps
  // that run again: this rank's shards of them go, whoever wrote them
  // (disk_held reads the folder), or saving those steps again would find
  // them there.
  void discard_disk_after(uint64_t index) {
    settle_disk(true);
    if (!engine && o.checkpoint_every == 0) return;
    try {
      disk().discard_after(index);
    } catch (const Error&) {
      engine.reset();  // its peers' shards go: the step is no longer every rank's
    }
  }

  checkpoint::Engine& disk() {
    if (!engine) {
      checkpoint::Options co;
      co.dir = o.job_dir + "/checkpoints";
      co.job = "sigmarun";
      co.rank = rank;
      co.world = world;
      co.base_every = o.checkpoint_base_every;
      co.keep = o.checkpoint_keep;
      engine = std::make_unique<checkpoint::Engine>(co);
    }
    return *engine;
  }

  // Background saves stage into memory the engine's writer faults in now,
  // while training starts.
  void reserve_disk() {
    if (o.checkpoint_every == 0 || !o.checkpoint_async) return;
    try {
      disk().reserve(state);
    } catch (const Error&) {
      engine.reset();  // the disk is not there: the first checkpoint says so, as a storage incident
    }
  }

  // A built communicator: when its building began and ended, the probe's
  // time, and the rank and world before it (a renumbering drops replicas).
  struct Connected {
    Clock::time_point t0, ready;
    double probe_s = 0;
    uint32_t old_rank = 0, old_world = 0;
  };

  // An assignment taken before the state was known (Session::wait_for_rank):
  // join() carries out the rest. At the job's first start the communicator
  // is built already (the program's own collectives may run on it first).
  struct Pending {
    protocol::Assign assign;
    uint64_t aborts_before = 0;
    std::optional<Connected> connected;
  };
  std::optional<Pending> pending;

  // Carries out an assignment: communicator, then the agreed state.
  uint64_t apply(const protocol::Assign& a, uint64_t aborts_before) {
    adopt_layout(a);
    if (a.restore == RestoreTier::peer) return join_replica(a, aborts_before);
    if (auto refused = refuse_if_unfit(a)) return *refused;
    const Connected c = connect(a, aborts_before);
    return apply_state(a, aborts_before, c);
  }

  // The layout and the tier's placement of an assignment.
  void adopt_layout(const protocol::Assign& a) {
    placement = protocol::replica_placement(a);
    tier_replicas = a.replicas;
    set_layout(a);
  }

  // At the job's start, a host whose memory cannot hold its ranks' tiers
  // refuses the assignment: the agent's goodbye follows.
  std::optional<uint64_t> refuse_if_unfit(const protocol::Assign& a) {
    if (a.generation != 1) return std::nullopt;
    auto why = tier_does_not_fit(a.host_ranks);
    if (!why) return std::nullopt;
    ch->send(protocol::encode(protocol::Refused{*why}));
    return wait_and_apply();  // the goodbye
  }

  // The assignment's communicator, checked by the collective probe.
  Connected connect(const protocol::Assign& a, uint64_t aborts_before) {
    Connected c;
    c.t0 = Clock::now();
    c.old_rank = rank;
    c.old_world = world;
    build_comm(a, aborts_before);
    if (engine && (c.old_rank != rank || c.old_world != world)) {
      settle_disk(true);
      engine.reset();
    }
    // Renumbered ranks (the world shrank): the replicas held are of ranks
    // that are other ranks now.
    if (c.old_world != 0 && (c.old_rank != rank || c.old_world != world)) tier->drop_replicas();
    // The collective probe: a one-element all-reduce over the new world
    // must give the world size before anything else runs on it.
    const auto tp = Clock::now();
    {
      hal::Buffer b(plugin, 0, sizeof(float));
      const float one = 1.0f;
      b.copy_from_host(&one, sizeof one);
      comm->run(hal::coll_args(HAL_COLL_ALL_REDUCE, HAL_DTYPE_F32, 1, b.data(), b.data()),
                std::chrono::nanoseconds(static_cast<int64_t>(o.probe_timeout_s * 1e9)));
      float got = 0;
      b.copy_to_host(&got, sizeof got);
      if (got != static_cast<float>(world)) {
        throw Error(Code::data_loss, "runtime: the collective probe summed " + std::to_string(got) +
                                         " over " + std::to_string(world) + " ranks");
      }
    }
    c.probe_s = seconds_since(tp);
    c.ready = Clock::now();
    return c;
  }

  // The agreed state on the built communicator: a fresh start's first
  // snapshot, or the restore from memory or disk.
  uint64_t apply_state(const protocol::Assign& a, uint64_t aborts_before, const Connected& c) {
    const RestoreTier how = a.restore;
    const uint64_t index = a.index;
    const auto t1 = Clock::now();
    resnapshot = false;
    if (how == RestoreTier::none) {
      tier->clear();
      tier->reserve(state_bytes(), *comm, placement);  // a fresh start: fault the snapshots' memory in now
      reserve_disk();
      items.save();  // the items as they start
      tier->snapshot(0, state, *comm, rank, placement);
    } else if (how == RestoreTier::memory) {
      // A replaced rank keeps its number: the holder sends its replica of it.
      // First each survivor's snapshot of `index` a surviving holder lacks
      // (restore_plan.hpp, refresh_moves), then the replaced ranks' states.
      std::vector<checkpoint::ReplicaHandoff> moves;
      for (auto [source, holder] : a.refresh) moves.push_back({source, source, holder, true});
      bool receiver = false;
      for (auto [h, r] : a.handoff) {
        moves.push_back({h, r, r});
        receiver |= r == rank;
      }
      if (!receiver && !tier->restore_own(index, state)) {
        throw Error(Code::data_loss,
                    "runtime: rank " + std::to_string(rank) + " holds no snapshot " + std::to_string(index));
      }
      tier->handoff(index, moves, state, *comm, rank);
      items.restore(false);
      tier->drop_after(index);
      discard_disk_after(index);
      // The refresh gave every surviving holder the restored snapshot. A
      // replacement holds no replica of the ranks it holds for: the first
      // step snapshots, so that a second fault soon after still finds every
      // rank's state in a peer. Not here: a rank that hangs in the exchange
      // must not keep the others from joining, so that the agent can name it.
      resnapshot = !moves.empty();
    } else {
      checkpoint::Metadata meta;
      const auto res = disk().restore(state, &meta, index);
      if (meta.step != index) {
        throw Error(Code::data_loss, "runtime: rank " + std::to_string(rank) + " found disk checkpoint " +
                                         std::to_string(meta.step) + ", the job restores " +
                                         std::to_string(index) +
                                         (res.refused.empty() ? "" : " (" + res.refused.front() + ")"));
      }
      items.restore(false);
      discard_disk_after(index);
      tier->clear();
      tier->reserve(state_bytes(), *comm, placement);
      reserve_disk();
      tier->snapshot(index, state, *comm, rank, placement);
    }
    if (contained) form_groups(aborts_before);
    stop_after = -1;
    assigned_aborts = aborts_before;
    current_step = static_cast<int64_t>(index);
    ch->send(protocol::encode(protocol::Joined{generation, rank, index, how,
                                               std::chrono::duration<double>(c.ready - c.t0).count(),
                                               c.probe_s, seconds_since(t1)}));
    return index;
  }

  // At the job's start: why the memory tiers of this host's ranks would not
  // fit its memory (nullopt: they fit, or the host's memory is unknown).
  std::optional<std::string> tier_does_not_fit(uint32_t host_ranks) const {
    const bool given = o.tier_memory_bytes > 0;
    const uint64_t available = given ? o.tier_memory_bytes : host_available;
    if (host_ranks == 0 || available == 0) return std::nullopt;
    return tier_unfit(state_bytes(), o.snapshot_keep, placement.replicas(), host_ranks, available,
                      given ? "SIGMA_TIER_MEMORY_BYTES" : "the host's available memory");
  }

  // Reports what this rank holds, with the failure's code (none: one
  // libsigma did not report), and waits for the next assignment.
  uint64_t recover(std::optional<Code> code, const std::string& reason) {
    abort_comm();
    {
      // Re-forms of the live set this rank left: the next assignment says
      // where it stands.
      std::lock_guard<std::mutex> lk(inbox_mu);
      reforms.clear();
    }
    handoff.reset();
    rejoin.reset();
    end_handoff();
    tier->abandon();    // a replica still in flight is not held
    settle_disk(true);  // what this rank holds on disk, durable
    protocol::RecoverRequest r{code,       reason, generation, tier->own_indices(), tier->replica_indices(),
                               disk_held()};
    r.replicas_of = tier->replicas_held();
    ch->send(protocol::encode(r));
    return wait_and_apply();
  }

  uint64_t wait_and_apply() {
    Command c = next_command();
    if (const auto* a = std::get_if<protocol::Assign>(&c.message)) return apply(*a, c.aborts_before);
    end_by(c);
  }

  // Session::wait_for_rank: the assignment, before the state is known.
  void wait_for_rank() {
    if (generation != 0 || pending)
      throw Error(Code::invalid_argument, "runtime: wait_for_rank after join, or twice");
    Command c = next_command();
    const auto* a = std::get_if<protocol::Assign>(&c.message);
    if (!a) end_by(c);
    adopt_layout(*a);
    Pending p{*a, c.aborts_before, std::nullopt};
    // Only the job's first start has every rank here at once; a worker that
    // joins later (a spare, a fresh start after an early fault) finds its
    // peers in their recovery.
    if (a->generation == 1 && a->restore == RestoreTier::none) p.connected = connect(*a, c.aborts_before);
    pending = std::move(p);
  }

  // Session::join: the assignment taken by wait_for_rank carried out, or
  // the next one.
  uint64_t join() {
    if (!pending) return wait_and_apply();
    const Pending p = std::move(*pending);
    pending.reset();
    if (!p.connected) return apply(p.assign, p.aborts_before);
    if (auto refused = refuse_if_unfit(p.assign)) return *refused;
    return apply_state(p.assign, p.aborts_before, *p.connected);
  }

  // The agent's retirement of this worker or end of the job, thrown.
  [[noreturn]] void end_by(const Command& c) {
    ended = true;
    const auto* retire = std::get_if<protocol::Retire>(&c.message);
    const std::string reason = retire ? retire->reason : std::get<protocol::Goodbye>(c.message).reason;
    throw Error(Code::aborted, "runtime: the agent " +
                                   std::string(retire ? "retired this worker" : "ended the job") +
                                   (reason.empty() ? std::string() : ": " + reason));
  }
};

}  // namespace sigma::runtime
