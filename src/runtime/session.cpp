// The worker's session: its public calls, the assignment and the control
// thread (session_impl.hpp says which thread owns what).
#include <sigma/runtime.hpp>

#include "runtime/job_key.hpp"
#include "runtime/session_impl.hpp"

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
  if (impl_->generation != 0 && !impl_->pending)
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

uint64_t Session::join() { return impl_->join(); }

void Session::wait_for_rank() { impl_->wait_for_rank(); }

bool Session::restore_pending() const noexcept { return impl_->pending && !impl_->pending->connected; }

// Between wait_for_rank and join a restoring worker's communicator is not
// built yet: its assignment says the rank.
uint32_t Session::rank() const noexcept {
  return restore_pending() ? impl_->pending->assign.rank : impl_->rank;
}
uint32_t Session::world_size() const noexcept {
  return restore_pending() ? impl_->pending->assign.world : impl_->world;
}
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
  impl_->agree_epoch(step);  // contained recovery: the replica's ranks in one epoch
}

bool Session::should_checkpoint(uint64_t step) const noexcept {
  return impl_->o.checkpoint_every > 0 && (step + 1) % impl_->o.checkpoint_every == 0;
}

bool Session::should_migrate() const noexcept { return impl_->stop_after.load() >= 0; }

void Session::step_end(uint64_t step) { step_end(step, StepReport{}); }

// This rank's snapshot of step `index`, its exchange posted to run on
// behind (contained recovery with a replica out: kept here).
void Session::take_snapshot(uint64_t index) {
  Impl& m = *impl_;
  if (m.contained && m.layout.degraded()) {
    // A replica is out: the world is not whole, the snapshot stays here.
    m.tier->snapshot(index, m.state, replica_comm(), 0, checkpoint::ReplicaPlacement::ring(1));
  } else {
    try {
      m.tier->snapshot(index, m.state, comm(), m.rank, m.placement);  // the exchange runs on behind
    } catch (const Error&) {
      // Contained recovery: a replica went out during the exchange. The
      // step is done; the live set re-forms for the next and the snapshot
      // stays here.
      if (!m.contained || !m.take_reform(index, m.collective_timeout())) throw;
      m.tier->snapshot(index, m.state, replica_comm(), 0, checkpoint::ReplicaPlacement::ring(1));
    }
  }
  m.ch->send(protocol::encode(protocol::Snapshotted{index}));
}

void Session::step_end(uint64_t step, const StepReport& report) {
  Impl& m = *impl_;
  const double seconds = seconds_since(m.step_t0);
  m.in_step_end = true;
  m.ch->send(protocol::encode(protocol::StepDone{step, seconds, report.loss, report.tokens, report.flops,
                                                 report.peak_flops, report.note}));
  const uint64_t index = step + 1;
  const bool snapshot = index % m.o.snapshot_every == 0 || std::exchange(m.resnapshot, false);
  if (snapshot || should_checkpoint(step)) m.items.save();  // the items' bytes, only when taken
  // The step is done on this rank whatever becomes of the snapshot's
  // exchange: a peer lost while it is posted cuts the exchange, not the
  // disk checkpoint, which is written before the failure goes on.
  std::exception_ptr cut;
  try {
    m.tier->settle();  // the last snapshot's exchange, if it has arrived
    if (snapshot) take_snapshot(index);
  } catch (const Error&) {
    cut = std::current_exception();
  }
  m.settle_disk(false);  // background saves that became durable since the last step
  if (should_checkpoint(step)) m.checkpoint(index);
  if (cut) std::rethrow_exception(cut);
  m.maybe_hand_off(step);  // contained recovery: a replica rejoins at the end of this step
  const int64_t stop = m.stop_after.load();
  if (stop >= 0 && static_cast<int64_t>(step) >= stop) {
    throw Error(Code::aborted, "runtime: the agent stops the job after step " + std::to_string(stop));
  }
}

// This rank's shard of step `index` on disk: written now, or copied now and
// written by the engine's thread (back-pressure when the last one is not
// done yet). A failed disk is told, not thrown: the memory tier still holds
// the state; the engine is made again at the next checkpoint (the folder
// may come back).
void Session::Impl::checkpoint(uint64_t index) {
  checkpoint::Metadata meta;
  meta.step = index;
  try {
    if (o.checkpoint_async) {
      disk().save_async(state, meta);
      pending_disk.push_back(index);
    } else {
      disk().save(state, meta);
      ch->send(protocol::encode(protocol::Checkpointed{index}));
    }
  } catch (const Error& e) {
    engine.reset();
    ch->send(protocol::encode(protocol::StorageFailed{index, e.what()}));
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
