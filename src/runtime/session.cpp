// The worker's session. Two threads: the training thread (every public
// member) and the session's control thread, which owns the agent channel's
// reading side, sends heartbeats with telemetry, and aborts the current
// communicator when the agent says a peer failed. They share the inbox
// (assignments), the current communicator (abort only) and a few atomics.
#include <sigma/bootstrap.hpp>
#include <sigma/host_staging.hpp>
#include <sigma/memory_tier.hpp>
#include <sigma/runtime.hpp>

#include "runtime/channel.hpp"
#include "runtime/job_key.hpp"
#include "runtime/protocol.hpp"
#include "runtime/state_items.hpp"
#include "runtime/tier_fit.hpp"

#include <unistd.h>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <functional>
#include <mutex>
#include <optional>
#include <thread>
#include <utility>

namespace sigma::runtime {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

namespace {

std::string env(const char* name, bool required) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == 0) {
    if (required)
      throw Error(Code::invalid_argument,
                  std::string("runtime: ") + name + " is not set (is this process started by sigmarun?)");
    return "";
  }
  return v;
}

double env_number(const char* name, double fallback, double lo, double hi) {
  const std::string v = env(name, false);
  if (v.empty()) return fallback;
  char* end = nullptr;
  const double x = std::strtod(v.c_str(), &end);
  if (end == v.c_str() || *end != 0 || !(x >= lo && x <= hi)) {
    throw Error(Code::invalid_argument, std::string("runtime: ") + name + "='" + v +
                                            "' is not a number in [" + std::to_string(lo) + ", " +
                                            std::to_string(hi) + "]");
  }
  return x;
}

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

}  // namespace

SessionOptions SessionOptions::from_env() {
  SessionOptions o;
  o.agent_socket = env("SIGMA_AGENT_SOCKET", true);
  o.device = static_cast<uint32_t>(env_number("SIGMA_DEVICE", -1, 0, 1e9));
  o.job_dir = env("SIGMA_JOB_DIR", true);
  if (auto p = env("SIGMA_HAL_PLUGIN", false); !p.empty()) o.plugin = p;
  o.plugin_options = env("SIGMA_HAL_OPTIONS", false);
  o.store = env("SIGMA_STORE", false);
  o.secret = env("SIGMA_JOB_SECRET", false);
  if (o.store.empty()) o.store = "file://" + o.job_dir + "/store";
  o.heartbeat_s = env_number("SIGMA_HEARTBEAT_S", o.heartbeat_s, 1e-3, 3600);
  o.snapshot_every = static_cast<uint64_t>(env_number("SIGMA_SNAPSHOT_EVERY", 1, 1, 1e9));
  o.checkpoint_every = static_cast<uint64_t>(env_number("SIGMA_CHECKPOINT_EVERY", 0, 0, 1e9));
  o.snapshot_keep = static_cast<size_t>(env_number("SIGMA_SNAPSHOT_KEEP", 2, 1, 1e6));
  o.tier_memory_bytes = static_cast<uint64_t>(env_number("SIGMA_TIER_MEMORY_BYTES", 0, 0, 1e18));
  o.checkpoint_base_every = static_cast<uint32_t>(env_number("SIGMA_CHECKPOINT_BASE_EVERY", 4, 1, 1e6));
  o.checkpoint_keep = static_cast<uint32_t>(env_number("SIGMA_CHECKPOINT_KEEP", 4, 1, 1e6));
  o.checkpoint_async = env_number("SIGMA_CHECKPOINT_ASYNC", 0, 0, 1) != 0;
  o.comm_timeout_s = env_number("SIGMA_COMM_TIMEOUT_S", o.comm_timeout_s, 1e-3, 7 * 86400.0);
  o.probe_timeout_s = env_number("SIGMA_PROBE_TIMEOUT_S", o.probe_timeout_s, 1e-3, 7 * 86400.0);
  o.collective_timeout_s =
      env_number("SIGMA_COLLECTIVE_TIMEOUT_S", o.collective_timeout_s, 1e-3, 7 * 86400.0);
  return o;
}

bool Session::under_agent() noexcept { return std::getenv("SIGMA_AGENT_SOCKET") != nullptr; }

struct Session::Impl {
  SessionOptions o;
  std::unique_ptr<Channel> ch;
  hal::PluginPtr plugin;
  std::vector<hal_field_id_t> fields;
  std::shared_ptr<bootstrap::Store> store;
  std::mutex comm_mu;
  std::shared_ptr<bootstrap::HalBootstrap> bs;  // guarded by comm_mu (the pointer)
  std::shared_ptr<hal::Communicator> comm;      // guarded by comm_mu (the pointer)
  std::function<void()> on_abort;               // guarded by comm_mu
  uint32_t rank = 0, world = 0;
  uint64_t generation = 0;
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
  uint64_t assigned_aborts = 0;        // ... when the assignment in force arrived
  // An assignment, retirement or goodbye from the agent, with the number of
  // aborts received before it (a later abort makes an assignment stale).
  struct Command {
    protocol::AgentMessage message;
    uint64_t aborts_before = 0;
  };
  std::mutex inbox_mu;
  std::condition_variable inbox_cv;
  std::deque<Command> inbox;
  std::atomic<bool> ended{false};

  // Ends what the training thread waits for: a collective (abort) or the
  // creation of the next communicator (its bootstrap is cancelled).
  void abort_comm() {
    std::shared_ptr<hal::Communicator> c;
    {
      std::lock_guard<std::mutex> lk(comm_mu);
      c = comm;
      if (bs) bs->cancel();
    }
    if (c) c->abort();
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

  static bool contained(const protocol::AgentMessage& m) {
    if (std::holds_alternative<protocol::Reform>(m)) return true;
    const auto* a = std::get_if<protocol::Assign>(&m);
    return a != nullptr && (a->restore == RestoreTier::peer || !a->replica_of.empty());
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
    if (contained(m)) {
      // The agent's side of contained recovery is there, this side is not
      // yet: running the assignment as an exact one would be wrong.
      const char* why =
          "runtime: this worker does not carry out contained recovery (a Reform, a peer "
          "restore, replicas of a model-parallel group); leaving the job";
      std::fprintf(stderr, "%s\n", why);
      m = protocol::Goodbye{why};
    }
    if (std::holds_alternative<protocol::Abort>(m)) {
      {
        // Under the inbox's lock: finish() waits for an abort there too.
        std::lock_guard<std::mutex> lk(inbox_mu);
        ++abort_seq;
      }
      abort_comm();
      inbox_cv.notify_all();
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

  void build_comm(const protocol::Assign& a, uint64_t aborts_before) {
    {
      std::lock_guard<std::mutex> lk(comm_mu);
      comm.reset();
    }
    rank = a.rank;
    world = a.world;
    generation = a.generation;
    auto boot = std::make_shared<bootstrap::HalBootstrap>(store, "gen-" + std::to_string(generation) + "/");
    {
      std::lock_guard<std::mutex> lk(comm_mu);
      bs = boot;
    }
    if (aborts_before != abort_seq.load()) boot->cancel();
    hal_comm_create_args_t ca{};
    ca.struct_size = sizeof(ca);
    ca.rank = rank;
    ca.world_size = world;
    ca.bootstrap = boot->table();
    ca.timeout_ns = static_cast<uint64_t>(o.comm_timeout_s * 1e9);
    auto c = std::make_shared<hal::Communicator>(plugin, ca);
    std::lock_guard<std::mutex> lk(comm_mu);
    comm = std::move(c);
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

  // Carries out an assignment: communicator, then the agreed state.
  uint64_t apply(const protocol::Assign& a, uint64_t aborts_before) {
    const auto t0 = Clock::now();
    const uint32_t old_rank = rank, old_world = world;
    placement = a.domains.empty() ? checkpoint::ReplicaPlacement::ring(a.world)
                                  : checkpoint::ReplicaPlacement::across(a.domains, a.replicas);
    if (a.generation == 1) {
      if (auto why = tier_does_not_fit(a.host_ranks)) {
        ch->send(protocol::encode(protocol::Refused{*why}));
        return wait_and_apply();  // the goodbye
      }
    }
    build_comm(a, aborts_before);
    if (engine && (old_rank != rank || old_world != world)) {
      settle_disk(true);
      engine.reset();
    }
    // Renumbered ranks (the world shrank): the replicas held are of ranks
    // that are other ranks now.
    if (old_world != 0 && (old_rank != rank || old_world != world)) tier->drop_replicas();
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
    const double probe_s = seconds_since(tp);
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
      std::vector<checkpoint::ReplicaHandoff> moves;
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
      // A replacement holds no replica of the ranks it holds for: the first
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
    stop_after = -1;
    assigned_aborts = aborts_before;
    current_step = static_cast<int64_t>(index);
    ch->send(protocol::encode(protocol::Joined{generation, rank, index, how,
                                               std::chrono::duration<double>(t1 - t0).count(), probe_s,
                                               seconds_since(t1)}));
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
    ended = true;
    const auto* retire = std::get_if<protocol::Retire>(&c.message);
    const std::string reason = retire ? retire->reason : std::get<protocol::Goodbye>(c.message).reason;
    throw Error(Code::aborted, "runtime: the agent " +
                                   std::string(retire ? "retired this worker" : "ended the job") +
                                   (reason.empty() ? std::string() : ": " + reason));
  }
};

Session::Session(SessionOptions options) : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.o = std::move(options);
  m.tier = std::make_unique<checkpoint::MemoryTier>(checkpoint::MemoryTierPolicy{m.o.snapshot_keep});
  m.host_available = host_memory_available();  // before any rank of this job reserves its tier
  m.rebuild_state();
  m.ch = Channel::connect(m.o.agent_socket);
  if (!m.o.secret.empty()) m.ch->authenticate(derive_key(*read_job_secret("", m.o.secret.c_str())), true);
  protocol::Hello hello;
  hello.device = m.o.device;
  hello.pid = ::getpid();
  if (const char* token = std::getenv("SIGMA_WORKER_TOKEN")) hello.token = token;
  // The agent hears exactly one greeting: the admission's verdict, passed or
  // failed with the reason.
  bool greeted = false;
  auto greet = [&](bool passed, std::string detail) {
    hello.self_test_passed = passed;
    hello.self_test_detail = std::move(detail);
    m.ch->send(protocol::encode(hello));
    greeted = true;
  };
  try {
    hal::LoadOptions lo;
    lo.options = m.o.plugin_options;
    lo.job_dir = m.o.job_dir;
    m.plugin = hal::Plugin::load(m.o.plugin, lo);
    const hal_self_test_result_t r = m.plugin->self_test(0, 16ull << 20);
    const bool passed = r.passed != 0;
    char detail[384];
    std::snprintf(
        detail, sizeof detail, "%s (GEMM rel. error %.2g, %llu bad words of %llu, copy %.2f GB/s, %.2f s)",
        r.message, r.gemm_max_rel_error, static_cast<unsigned long long>(r.memory_pattern_errors),
        static_cast<unsigned long long>(r.memory_bytes_tested) / 8, r.copy_bandwidth * 1e-9, r.duration_s);
    std::string verdict = detail;
    for (const auto& f : m.plugin->telemetry_fields(0)) m.fields.push_back(f.id);
    // The collective probe of admission: the device alone (a world of one)
    // must run an all-reduce and give the right sum.
    if (passed) {
      hal_comm_create_args_t ca{};
      ca.struct_size = sizeof(ca);
      ca.world_size = 1;
      ca.timeout_ns = 10'000'000'000ull;
      hal::Communicator solo(m.plugin, ca);
      hal::Buffer b(m.plugin, 0, sizeof(float));
      const float x = 3.0f;
      b.copy_from_host(&x, sizeof x);
      solo.run(hal::coll_args(HAL_COLL_ALL_REDUCE, HAL_DTYPE_F32, 1, b.data(), b.data()),
               std::chrono::seconds(10));
      float got = 0;
      b.copy_to_host(&got, sizeof got);
      if (got != x) {
        greet(false, "collective probe: a world-of-one all-reduce gave " + std::to_string(got) + " for " +
                         std::to_string(x));
        throw Error(Code::unavailable,
                    "runtime: the collective probe failed on device " + std::to_string(m.o.device));
      }
      verdict += "; collective probe ok";
    }
    m.store = bootstrap::open_store(m.o.store);
    if (!passed) {
      greet(false, verdict);
      throw Error(Code::unavailable, std::string("runtime: self_test failed on device ") +
                                         std::to_string(m.o.device) + ": " + r.message);
    }
    greet(true, verdict);
  } catch (const Error& e) {
    if (!greeted) greet(false, e.what());
    throw;
  }
  m.control = std::thread([&m] { m.control_loop(); });
}

Session::~Session() {
  impl_->stopping = true;
  impl_->ch->shutdown();
  if (impl_->control.joinable()) impl_->control.join();
  std::lock_guard<std::mutex> lk(impl_->comm_mu);
  impl_->comm.reset();
}

void Session::set_state(std::vector<checkpoint::TensorView> views) {
  for (const auto& v : views)
    if (v.name == StateItems::kTensor)
      throw Error(Code::invalid_argument, std::string("runtime: the state tensor name '") +
                                              StateItems::kTensor + "' is the session's own");
  impl_->views = std::move(views);
  impl_->rebuild_state();
}

void Session::add_state_item(StateItem item) {
  if (impl_->generation != 0)
    throw Error(Code::invalid_argument,
                "runtime: state item '" + item.name + "' added after join (the snapshots' layout is fixed)");
  impl_->items.add(std::move(item));
  impl_->rebuild_state();
}

uint64_t Session::batch_of(uint64_t step) const { return impl_->items.batch_of(step); }

const std::vector<std::pair<uint64_t, uint64_t>>& Session::skipped_batches() const noexcept {
  return impl_->items.skipped();
}

void Session::all_reduce(void* data, uint64_t count, hal_dtype_t dtype, hal_reduce_op_t op,
                         std::optional<std::chrono::nanoseconds> timeout) {
  hal::Communicator& c = comm();
  impl_->host_staging().all_reduce(c, data, count, dtype, op, timeout.value_or(impl_->collective_timeout()));
}

void Session::broadcast(void* data, uint64_t count, hal_dtype_t dtype, uint32_t root,
                        std::optional<std::chrono::nanoseconds> timeout) {
  if (root >= impl_->world)
    throw Error(Code::invalid_argument, "runtime: broadcast root " + std::to_string(root) +
                                            " is not a rank of world " + std::to_string(impl_->world));
  hal::Communicator& c = comm();
  impl_->host_staging().broadcast(c, data, count, dtype, root, timeout.value_or(impl_->collective_timeout()));
}

void Session::all_gather(void* data, uint64_t count, hal_dtype_t dtype,
                         std::optional<std::chrono::nanoseconds> timeout) {
  hal::Communicator& c = comm();
  impl_->host_staging().all_gather(c, data, count, dtype, impl_->rank, impl_->world,
                                   timeout.value_or(impl_->collective_timeout()));
}

void Session::on_abort(std::function<void()> hook) {
  std::lock_guard<std::mutex> lk(impl_->comm_mu);
  impl_->on_abort = std::move(hook);
}

uint64_t Session::join() { return impl_->wait_and_apply(); }

uint32_t Session::rank() const noexcept { return impl_->rank; }
uint32_t Session::world_size() const noexcept { return impl_->world; }
uint64_t Session::generation() const noexcept { return impl_->generation; }
const hal::PluginPtr& Session::plugin() const noexcept { return impl_->plugin; }

hal::Communicator& Session::comm() {
  std::lock_guard<std::mutex> lk(impl_->comm_mu);
  if (!impl_->comm) throw Error(Code::aborted, "runtime: no communicator (call join or recover)");
  return *impl_->comm;
}

void Session::step_begin(uint64_t step) {
  impl_->in_step_end = false;
  impl_->current_step = static_cast<int64_t>(step);
  impl_->step_t0 = Clock::now();
}

bool Session::should_checkpoint(uint64_t step) const noexcept {
  return impl_->o.checkpoint_every > 0 && (step + 1) % impl_->o.checkpoint_every == 0;
}

bool Session::should_migrate() const noexcept { return impl_->stop_after.load() >= 0; }

void Session::step_end(uint64_t step) { step_end(step, StepReport{}); }

void Session::step_end(uint64_t step, const StepReport& report) {
  Impl& m = *impl_;
  const double seconds = seconds_since(m.step_t0);
  m.in_step_end = true;
  m.ch->send(protocol::encode(protocol::StepDone{step, seconds, report.loss, report.tokens, report.flops,
                                                 report.peak_flops, report.note}));
  const uint64_t index = step + 1;
  m.tier->settle();  // the last snapshot's exchange, if it has arrived
  const bool snapshot = index % m.o.snapshot_every == 0 || std::exchange(m.resnapshot, false);
  if (snapshot || should_checkpoint(step)) m.items.save();  // the items' bytes, only when taken
  if (snapshot) {
    m.tier->snapshot(index, m.state, comm(), m.rank, m.placement);  // the exchange runs on behind
    m.ch->send(protocol::encode(protocol::Snapshotted{index}));
  }
  m.settle_disk(false);  // background saves that became durable since the last step
  if (should_checkpoint(step)) {
    checkpoint::Metadata meta;
    meta.step = index;
    try {
      if (m.o.checkpoint_async) {
        // Copied now, written by the engine's thread while training goes on
        // (back-pressure when the last one is not done yet).
        m.disk().save_async(m.state, meta);
        m.pending_disk.push_back(index);
      } else {
        m.disk().save(m.state, meta);
        m.ch->send(protocol::encode(protocol::Checkpointed{index}));
      }
    } catch (const Error& e) {
      // The disk failed, not the device: the memory tier still holds the
      // state, so training goes on and the agent is told. The engine is
      // made again at the next checkpoint (the folder may come back).
      m.engine.reset();
      m.ch->send(protocol::encode(protocol::StorageFailed{index, e.what()}));
    }
  }
  const int64_t stop = m.stop_after.load();
  if (stop >= 0 && static_cast<int64_t>(step) >= stop) {
    throw Error(Code::aborted, "runtime: the agent stops the job after step " + std::to_string(stop));
  }
}

uint64_t Session::rollback(uint64_t index) {
  Impl& m = *impl_;
  if (!m.tier->restore_own(index, m.state)) {
    std::string held;
    for (uint64_t i : m.tier->own_indices()) held += (held.empty() ? "" : ", ") + std::to_string(i);
    throw Error(Code::data_loss, "runtime: rollback to snapshot " + std::to_string(index) + ": rank " +
                                     std::to_string(m.rank) + " holds only [" + held + "]");
  }
  m.items.restore(true);  // the snapshot's items, but for those kept on rollback
  m.tier->drop_after(index);
  m.discard_disk_after(index);
  m.current_step = static_cast<int64_t>(index);
  return index;
}

uint64_t Session::rollback(const Rollback& r) {
  Impl& m = *impl_;
  const uint64_t begin = m.items.batch_of(r.skip_begin);  // numbered as before the rollback
  const uint64_t end = r.skip_end > r.skip_begin ? m.items.batch_of(r.skip_end - 1) + 1 : begin;
  const uint64_t next = rollback(r.to_index);
  m.items.skip(begin, end);
  return next;
}

uint64_t Session::recover(const Error& failure) {
  return impl_->recover(failure.code(), std::string(code_name(failure.code())) + ": " + failure.what());
}

uint64_t Session::recover(Code code, const std::string& reason) { return impl_->recover(code, reason); }

uint64_t Session::recover(const std::string& reason) { return impl_->recover(std::nullopt, reason); }

void Session::finish(uint64_t steps_done) {
  Impl& m = *impl_;
  m.settle_disk(true);  // the last checkpoint durable and told before the job ends
  // An abort since the assignment in force (a peer failed while this rank
  // ran its last steps) is answered with a report, not with Done.
  const uint64_t aborts = m.assigned_aborts;
  bool told = false;
  std::unique_lock<std::mutex> lk(m.inbox_mu);
  for (;;) {
    while (!m.inbox.empty()) {
      const bool leaving = !std::holds_alternative<protocol::Assign>(m.inbox.front().message);
      m.inbox.pop_front();
      if (leaving) return;  // the goodbye (or a retirement): the job is over here
    }
    if (m.agent_gone.load()) return;  // the agent left first: over either way
    if (m.abort_seq.load() != aborts)
      throw Error(Code::aborted, "runtime: a peer failed before the job ended; recover and finish again");
    if (!told) {
      lk.unlock();
      m.ch->send(protocol::encode(protocol::Done{steps_done}));
      lk.lock();
      told = true;
      continue;
    }
    m.inbox_cv.wait(lk);
  }
}

bool Session::ended() const noexcept { return impl_->ended.load(); }

bool Session::agent_gone() const noexcept { return impl_->agent_gone.load(); }

}  // namespace sigma::runtime
