// Communicators of the sim vendor: the inner vendor's, with faults on top.
// Operations go to the inner communicator at post time (so its checks and
// ordering hold); what an early-life chip does happens around them: a hung
// operation never reports completion, a slow link stretches it, silent
// corruption flips a bit of the result, a lost device fails everything.
#include "opaque.hpp"
#include "sim.hpp"

#include <sigma/hal_support.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <condition_variable>
#include <cstring>
#include <memory>
#include <set>
#include <thread>

struct hal_comm_s {
  hal_comm_t inner = nullptr;
  uint32_t rank = 0, size = 1;
  std::mutex mu;  // with cv: wakes waiters on abort
  std::condition_variable cv;
  std::atomic<bool> aborted{false};
  std::atomic<hal_status_t> async_error{HAL_OK};
};

struct hal_request_s {
  hal_comm_s* comm;     // nullptr once the comm was destroyed
  hal_request_t inner;  // nullptr for an operation that was never posted
  std::mutex mu;        // guards the fields below
  bool hung = false;
  double extra_ns = 0;                    // slow link: the time its faults add to this op's own transfer
  uint64_t done_ns = 0;                   // when the inner operation was seen complete
  uint64_t release_ns = 0;                // when its slow-link stretch ends (set with done_ns)
  hal_status_t status = HAL_IN_PROGRESS;  // final status once known
  // Silent corruption (a flipped bit) or a NaN to write into the result, once.
  bool corrupt = false;
  bool nan = false;
  void* out = nullptr;
  uint64_t out_count = 0;
  hal_dtype_t dtype = HAL_DTYPE_F32;
  uint64_t op_index = 0;
};

namespace sim_vendor {
namespace {

std::mutex g_mu;  // guards the two sets
std::set<hal_comm_s*> g_comms;
std::set<hal_request_s*> g_requests;

const hal_coll_api_t& inner() { return *state().inner.api->coll; }

hal_status_t inner_status(hal_status_t st) {
  if (st < 0) return fail(st, std::string("sim: inner vendor: ") + state().inner.api->get_last_error());
  return st;
}

bool live(hal_comm_t c) {
  std::lock_guard lk(g_mu);
  return c && g_comms.count(c);
}

// Where an operation's result lands on this rank: (pointer, elements).
std::pair<void*, uint64_t> result_of(const hal_coll_args_t& a, uint32_t size) {
  const uint64_t es = hal_dtype_size(a.dtype);
  switch (a.op) {
    case HAL_COLL_ALL_REDUCE:
    case HAL_COLL_BROADCAST:
    case HAL_COLL_REDUCE_SCATTER:
    case HAL_COLL_RECV:
      return {a.recvbuf, a.count};
    case HAL_COLL_ALL_GATHER:
    case HAL_COLL_ALL_TO_ALL:
      return {a.recvbuf, a.count * size};
    case HAL_COLL_ALL_TO_ALLV:
      for (uint32_t j = 0; a.recv_counts && j < size; ++j)
        if (a.recv_counts[j] > 0)
          return {static_cast<uint8_t*>(a.recvbuf) + a.recv_displs[j] * es, a.recv_counts[j]};
      return {nullptr, 0};
    default:
      return {nullptr, 0};
  }
}

// Flips the top mantissa bit (a high bit for integers) of one element: a
// plausible silent error, large enough for a fingerprint to catch. A NaN
// burst writes a quiet NaN there instead (floating-point results only).
void corrupt_one(hal_request_s* r) {
  const uint64_t es = hal_dtype_size(r->dtype);
  if (r->out == nullptr || r->out_count == 0 || es == 0) return;
  uint64_t h = state().scenario.seed ^ (r->op_index * 0x9E3779B97F4A7C15ull);
  h ^= h >> 29;
  const uint64_t idx = h % r->out_count;
  static const int bit[HAL_DTYPE_COUNT_V1] = {22, 9, 6, 51, 20, 40, 6};
  uint8_t elem[8] = {0};
  uint8_t* where = static_cast<uint8_t*>(r->out) + idx * es;
  const hal_device_api_t& d = *state().inner.api->device;
  if (d.memcpy(0, elem, where, es, HAL_COPY_DEVICE_TO_HOST, nullptr) != HAL_OK) return;
  if (r->nan) {
    static const uint64_t quiet_nan[HAL_DTYPE_COUNT_V1] = {0x7FC00000, 0x7E00, 0x7FC0, 0x7FF8000000000000ull,
                                                           0,          0,      0};
    std::memcpy(elem, &quiet_nan[r->dtype], es);  // little-endian: the low bytes
  } else {
    const int b = bit[r->dtype];
    elem[b / 8] ^= static_cast<uint8_t>(1u << (b % 8));
  }
  d.memcpy(0, where, elem, es, HAL_COPY_HOST_TO_DEVICE, nullptr);
}

// The fault plan for the op about to be posted. Caller holds state().mu.
struct Plan {
  bool lost = false, crash = false, hang = false, corrupt = false, nan = false;
  double extra_ns = 0;  // slow or flapping link, slow bandwidth: added to the op's own transfer
};

// The scenario names operations by hal_coll_op_t's values.
static_assert(HAL_COLL_ALL_REDUCE == 0 && HAL_COLL_ALL_GATHER == 1 && HAL_COLL_REDUCE_SCATTER == 2 &&
              HAL_COLL_ALL_TO_ALL == 3 && HAL_COLL_ALL_TO_ALLV == 4 && HAL_COLL_BROADCAST == 5 &&
              HAL_COLL_RECV == 8);

bool is_float(hal_dtype_t t) {
  return t == HAL_DTYPE_F32 || t == HAL_DTYPE_F16 || t == HAL_DTYPE_BF16 || t == HAL_DTYPE_F64;
}

// The time a slow link adds to an operation that moves `bytes` over it. The
// fault stretches the operation's own transfer (its latency plus its bytes
// at the link's healthy rate), never the time it waited for its peers: a
// wait-based stretch would feed on the delays of other slowed devices and
// grow a step's time geometrically.
double link_delay_ns(const ActiveFault& f, uint64_t bytes) {
  const double transfer_ns = static_cast<double>(bytes) / f.gbps;  // GB/s is bytes per ns
  if (f.kind == FaultKind::slow_bandwidth) return (f.factor - 1) * transfer_ns;
  return (f.factor - 1) * (f.latency_us * 1e3 + transfer_ns);
}

// Whether a link fault slows an operation posted at scenario time t.
bool link_slow_at(const ActiveFault& f, double t) {
  if (t >= f.until_s || !(f.gbps > 0)) return false;
  if (f.kind != FaultKind::flapping_link) return true;
  // Slow for the first half of every period, normal for the second.
  return f.period_s > 0 && std::fmod(t - std::max(0.0, f.from_s), f.period_s) < f.period_s / 2;
}

Plan plan_for(uint64_t index, bool has_output, const hal_coll_args_t& args, uint64_t bytes_over_link) {
  State& s = state();
  s.fire_due_locked();
  const double t = s.now_s();
  Plan p;
  p.lost = s.device_lost;
  for (auto& f : s.faults) {
    const bool by_op = f.at_op >= 0, by_time = f.from_s >= 0;
    const bool started = (by_op && static_cast<int64_t>(index) >= f.at_op) || (by_time && t >= f.from_s);
    if (!started) continue;
    switch (f.kind) {
      case FaultKind::device_lost:
        if (!f.fired) {
          f.fired = true;
          s.device_lost = true;
          p.lost = true;
        }
        break;
      case FaultKind::crash:
        if (!f.fired) {
          f.fired = true;  // once per device and run (RunState), not per process
          p.crash = !f.from_scenario || s.run.first_strike(s.rank, f.index);
        }
        break;
      case FaultKind::hang:
        if (!f.fired) {
          f.fired = true;
          p.hang = true;
        }
        break;
      case FaultKind::slow_link:
      case FaultKind::flapping_link:
      case FaultKind::slow_bandwidth:
        // One link: where several of its faults overlap, the slowest governs.
        if (link_slow_at(f, t)) p.extra_ns = std::max(p.extra_ns, link_delay_ns(f, bytes_over_link));
        break;
      case FaultKind::silent_corruption:
      case FaultKind::nan_burst: {
        const bool nan = f.kind == FaultKind::nan_burst;
        if (f.remaining > 0 && has_output && (f.op < 0 || f.op == static_cast<int>(args.op)) &&
            (!nan || is_float(args.dtype)) && !p.corrupt) {
          --f.remaining;
          p.corrupt = true;
          p.nan = nan;
        }
        break;
      }
    }
  }
  return p;
}

// The final status of a request once its inner operation is done and any
// slow-link stretch has passed; HAL_IN_PROGRESS before.
hal_status_t settle(hal_request_s* r, hal_status_t inner_st) {
  std::lock_guard lk(r->mu);
  if (r->status != HAL_IN_PROGRESS) return r->status;
  if (inner_st == HAL_IN_PROGRESS) return HAL_IN_PROGRESS;
  const uint64_t now = now_ns();
  if (r->done_ns == 0) {
    r->done_ns = now;
    if (inner_st == HAL_OK && r->corrupt) corrupt_one(r);
  }
  const double stretch = r->extra_ns;
  r->release_ns = r->done_ns + static_cast<uint64_t>(stretch);
  if (inner_st == HAL_OK && static_cast<double>(now - r->done_ns) < stretch) return HAL_IN_PROGRESS;
  r->status = inner_st;
  return r->status;
}

// An operation ended by the abort that a lost device caused is reported as
// the device loss itself.
hal_status_t blame(hal_request_s* r, hal_status_t st) {
  if (st == HAL_ERR_ABORTED && r->comm != nullptr && r->comm->async_error.load() == HAL_ERR_DEVICE_LOST)
    return HAL_ERR_DEVICE_LOST;
  return st;
}

hal_status_t finished(hal_status_t st) {
  if (st < 0) return fail(st, std::string("sim: the operation failed: ") + hal_status_name_of(st));
  return st;
}

}  // namespace

const char* hal_status_name_of(hal_status_t st) {
  switch (st) {
    case HAL_ERR_ABORTED:
      return "aborted";
    case HAL_ERR_DEVICE_LOST:
      return "device lost";
    case HAL_ERR_REMOTE_ERROR:
      return "a peer failed";
    case HAL_ERR_TIMEOUT:
      return "timed out";
    default:
      return "error";
  }
}

namespace {

hal_status_t sim_comm_create(const hal_comm_create_args_t* args, hal_comm_t* comm) {
  if (args == nullptr || comm == nullptr || args->struct_size < HAL_COMM_CREATE_ARGS_V1_0_SIZE)
    return fail(HAL_ERR_INVALID_ARGUMENT, "sim: comm args NULL or struct_size too small");
  if (args->world_size == 0 || args->rank >= args->world_size)
    return fail(HAL_ERR_INVALID_ARGUMENT,
                "sim: rank " + std::to_string(args->rank) + " of world " + std::to_string(args->world_size));
  if (hal_status_t st = check_alive(args->device); st != HAL_OK) return st;
  {
    // The first multi-rank communicator tells an unnamed process its rank.
    std::lock_guard lk(state().mu);
    if (!state().rank_fixed && args->world_size > 1) {
      state().rank = args->rank;
      state().rank_fixed = true;
      state().arm_scenario_faults();
    }
  }
  hal_comm_create_args_t a = *args;
  a.struct_size = sizeof(a);
  a.device = 0;
  auto c = std::make_unique<hal_comm_s>();
  if (hal_status_t st = inner_status(inner().comm_create(&a, &c->inner)); st != HAL_OK) return st;
  c->rank = args->rank;
  c->size = args->world_size;
  std::lock_guard lk(g_mu);
  g_comms.insert(c.get());
  *comm = c.release();
  return HAL_OK;
}

void abort_comm(hal_comm_s* c, hal_status_t why) {
  hal_status_t expected = HAL_OK;
  c->async_error.compare_exchange_strong(expected, why);
  if (!c->aborted.exchange(true)) inner().comm_abort(c->inner);
  std::lock_guard lk(c->mu);
  c->cv.notify_all();
}

hal_status_t sim_comm_abort(hal_comm_t comm) {
  if (!live(comm)) return fail(HAL_ERR_INVALID_ARGUMENT, "sim: unknown comm");
  abort_comm(comm, HAL_ERR_ABORTED);
  return HAL_OK;
}

void destroy(hal_comm_s* c) {
  abort_comm(c, HAL_ERR_ABORTED);
  inner().comm_destroy(c->inner);
  delete c;
}

hal_status_t sim_comm_destroy(hal_comm_t comm) {
  {
    std::lock_guard lk(g_mu);
    if (!comm || g_comms.erase(comm) == 0) return fail(HAL_ERR_INVALID_ARGUMENT, "sim: unknown comm");
    for (auto* r : g_requests)
      if (r->comm == comm) r->comm = nullptr;
  }
  destroy(comm);
  return HAL_OK;
}

hal_status_t sim_get_async_error(hal_comm_t comm, hal_status_t* error) {
  if (error == nullptr) return fail(HAL_ERR_INVALID_ARGUMENT, "sim: error is NULL");
  if (!live(comm)) return fail(HAL_ERR_INVALID_ARGUMENT, "sim: unknown comm");
  hal_status_t own = comm->async_error.load();
  if (own != HAL_OK) {
    *error = own;
    return HAL_OK;
  }
  return inner_status(inner().comm_get_async_error(comm->inner, error));
}

// The checks of post and run; HAL_OK when the operation may go on.
hal_status_t admit(hal_comm_t comm, const hal_coll_args_t* args) {
  if (args == nullptr || args->struct_size < HAL_COLL_ARGS_V1_0_SIZE)
    return fail(HAL_ERR_INVALID_ARGUMENT, "sim: args NULL or struct_size too small");
  if (!live(comm)) return fail(HAL_ERR_INVALID_ARGUMENT, "sim: unknown comm");
  if (comm->aborted)
    return fail(comm->async_error.load() == HAL_ERR_DEVICE_LOST ? HAL_ERR_DEVICE_LOST : HAL_ERR_ABORTED,
                "sim: the communicator was aborted");
  return HAL_OK;
}

// The bytes an operation moves over this device's link, sent plus received
// (ring algorithms for the reductions and gathers): what a slow_bandwidth
// fault charges for.
uint64_t link_bytes(const hal_coll_args_t& a, uint32_t rank, uint32_t n) {
  const uint64_t es = hal_dtype_size(a.dtype), b = a.count * es;
  switch (a.op) {
    case HAL_COLL_ALL_REDUCE:
      return n > 1 ? 4 * (n - 1) * b / n : 0;
    case HAL_COLL_ALL_GATHER:
    case HAL_COLL_REDUCE_SCATTER:
    case HAL_COLL_ALL_TO_ALL:
      return 2 * uint64_t{n - 1} * b;
    case HAL_COLL_ALL_TO_ALLV: {
      uint64_t sum = 0;
      for (uint32_t j = 0; j < n; ++j)
        if (j != rank) sum += (a.send_counts ? a.send_counts[j] : 0) + (a.recv_counts ? a.recv_counts[j] : 0);
      return sum * es;
    }
    case HAL_COLL_BROADCAST:
    case HAL_COLL_SEND:
    case HAL_COLL_RECV:
      return b;
    default:
      return 0;
  }
}

// Counts the operation and plans its faults into `r`. A crash ends the
// process here; a lost device fails the call (DEVICE_LOST).
hal_status_t plan_into(hal_comm_t comm, const hal_coll_args_t& args, hal_request_s& r, Plan& p) {
  {
    std::lock_guard lk(state().mu);
    const auto out = result_of(args, comm->size);
    r.op_index = state().ops_posted++;
    p = plan_for(r.op_index, out.second > 0, args, link_bytes(args, comm->rank, comm->size));
    r.out = out.first;
    r.out_count = out.second;
  }
  if (p.crash) ::kill(::getpid(), SIGKILL);  // a driver crash takes the process down
  if (p.lost) {
    abort_all_comms_device_lost();
    return fail(HAL_ERR_DEVICE_LOST, "sim: device lost (rank " + std::to_string(state().rank) + ")");
  }
  r.hung = p.hang;
  r.extra_ns = p.extra_ns;
  r.corrupt = p.corrupt;
  r.nan = p.nan;
  r.dtype = args.dtype;
  return HAL_OK;
}

// Posts a planned operation to the inner vendor and registers it.
hal_status_t post_planned(hal_comm_t comm, const hal_coll_args_t& args, hal_stream_t stream,
                          std::unique_ptr<hal_request_s> r, hal_request_t* request) {
  if (hal_status_t st = inner_status(inner().post(comm->inner, &args, stream, &r->inner)); st != HAL_OK)
    return st;
  r->comm = comm;
  std::lock_guard lk(g_mu);
  g_requests.insert(r.get());
  *request = r.release();
  return HAL_OK;
}

hal_status_t sim_post(hal_comm_t comm, const hal_coll_args_t* args, hal_stream_t stream,
                      hal_request_t* request) {
  if (request == nullptr) return fail(HAL_ERR_INVALID_ARGUMENT, "sim: request is NULL");
  if (hal_status_t st = admit(comm, args); st != HAL_OK) return st;
  hal_coll_args_t local;
  if (opaque::enabled() && (args = opaque::translate(args, local)) == nullptr)
    return HAL_ERR_INVALID_ARGUMENT;
  auto r = std::make_unique<hal_request_s>();
  Plan p;
  if (hal_status_t st = plan_into(comm, *args, *r, p); st != HAL_OK) return st;
  return post_planned(comm, *args, stream, std::move(r), request);
}

// The status of a hung request: it ends only when its comm is aborted.
hal_status_t hung_status(hal_request_s* r) {
  if (r->comm == nullptr) return HAL_ERR_ABORTED;
  return r->comm->aborted ? r->comm->async_error.load() : HAL_IN_PROGRESS;
}

hal_status_t sim_test(hal_request_t r) {
  if (r == nullptr) return fail(HAL_ERR_INVALID_ARGUMENT, "sim: request is NULL");
  poll_device_lost();
  if (r->hung) return finished(hung_status(r));
  return finished(blame(r, settle(r, inner().test(r->inner))));
}

hal_status_t sim_wait(hal_request_t r, uint64_t timeout_ns) {
  if (r == nullptr) return fail(HAL_ERR_INVALID_ARGUMENT, "sim: request is NULL");
  const uint64_t start = now_ns();
  const uint64_t deadline = timeout_ns > UINT64_MAX - start ? UINT64_MAX : start + timeout_ns;
  for (;;) {
    poll_device_lost();  // a device that dies while we wait fails the wait
    hal_status_t st;
    if (r->hung) {
      st = hung_status(r);
    } else {
      // Wait on the inner operation in slices, so an abort is seen promptly.
      const uint64_t now = now_ns();
      const uint64_t slice = std::min<uint64_t>(deadline > now ? deadline - now : 0, 20'000'000);
      hal_status_t in = inner().wait(r->inner, slice);
      if (in == HAL_ERR_TIMEOUT) in = HAL_IN_PROGRESS;
      st = blame(r, settle(r, in));
    }
    if (st != HAL_IN_PROGRESS) return finished(st);
    const uint64_t now = now_ns();
    if (now >= deadline) {
      return timeout_ns == 0 ? HAL_IN_PROGRESS
                             : fail(HAL_ERR_TIMEOUT, "sim: operation still running after " +
                                                         std::to_string(timeout_ns) + " ns");
    }
    if (r->hung || r->done_ns != 0) {
      // Hung, or inside a slow-link stretch: sleep (until the stretch ends,
      // at most 20 ms at a time), waking on abort.
      if (r->comm == nullptr) continue;
      uint64_t nap = std::min<uint64_t>(deadline - now, 20'000'000);
      {
        std::lock_guard rl(r->mu);
        if (!r->hung && r->release_ns > now) nap = std::min(nap, r->release_ns - now);
      }
      std::unique_lock lk(r->comm->mu);
      r->comm->cv.wait_for(lk, std::chrono::nanoseconds(nap), [&] { return r->comm->aborted.load(); });
    }
  }
}

hal_status_t sim_request_free(hal_request_t r) {
  if (r == nullptr) return fail(HAL_ERR_INVALID_ARGUMENT, "sim: request is NULL");
  {
    std::lock_guard lk(g_mu);
    if (!g_requests.count(r)) return fail(HAL_ERR_INVALID_ARGUMENT, "sim: unknown request");
    const bool running = (r->hung ? hung_status(r) : settle(r, inner().test(r->inner))) == HAL_IN_PROGRESS;
    if (running && r->comm != nullptr && !r->comm->aborted)
      return fail(HAL_ERR_INVALID_ARGUMENT, "sim: request still running; abort its comm first");
    g_requests.erase(r);
  }
  if (r->inner) inner().request_free(r->inner);
  delete r;
  return HAL_OK;
}

// Whether a time-based device loss or crash is armed and has not fired:
// post and wait see one of those strike mid-operation (the wait polls for
// it), a blocking run of the inner vendor would not.
bool timed_fault_armed() {
  std::lock_guard lk(state().mu);
  for (const auto& f : state().faults)
    if (!f.fired && f.from_s >= 0 && (f.kind == FaultKind::device_lost || f.kind == FaultKind::crash))
      return true;
  return false;
}

// hal_coll_run_fn. An operation that meets no hang or slow link, while no
// timed fault is armed, goes to the inner vendor's run (a healthy chip costs
// nothing extra); silent corruption is applied to its result. Anything else
// is posted and waited for, and aborted on timeout, as the host would.
hal_status_t sim_run(hal_comm_t comm, const hal_coll_args_t* args, hal_stream_t stream, uint64_t timeout_ns) {
  if (hal_status_t st = admit(comm, args); st != HAL_OK) return st;
  hal_coll_args_t local;
  if (opaque::enabled() && (args = opaque::translate(args, local)) == nullptr)
    return HAL_ERR_INVALID_ARGUMENT;
  auto r = std::make_unique<hal_request_s>();
  Plan p;
  if (hal_status_t st = plan_into(comm, *args, *r, p); st != HAL_OK) return st;
  hal_coll_run_fn* inner_run = HAL_HAS_FIELD(&inner(), hal_coll_api_t, run) ? inner().run : nullptr;
  if (inner_run != nullptr && !r->hung && r->extra_ns == 0 && !timed_fault_armed()) {
    hal_status_t st = inner_run(comm->inner, args, stream, timeout_ns);
    if (st == HAL_OK && r->corrupt) corrupt_one(r.get());
    if (st == HAL_ERR_TIMEOUT) abort_comm(comm, HAL_ERR_TIMEOUT);
    r->comm = comm;
    st = blame(r.get(), st);
    return st < 0 ? fail(st, std::string("sim: the operation failed: ") + hal_status_name_of(st) +
                                 " (inner vendor: " + state().inner.api->get_last_error() + ")")
                  : st;
  }
  hal_request_t req = nullptr;
  if (hal_status_t st = post_planned(comm, *args, stream, std::move(r), &req); st != HAL_OK) return st;
  const hal_status_t st = sim_wait(req, timeout_ns);
  const std::string why = last_error();  // before the wait below replaces it
  if (st == HAL_ERR_TIMEOUT) {
    abort_comm(comm, HAL_ERR_TIMEOUT);
    sim_wait(req, 5'000'000'000ull);  // the aborted operation lets go of the buffers
  }
  sim_request_free(req);
  return st < 0 ? fail(st, why) : st;
}

}  // namespace

void abort_all_comms_device_lost() {
  std::vector<hal_comm_s*> comms;
  {
    std::lock_guard lk(g_mu);
    comms.assign(g_comms.begin(), g_comms.end());
  }
  for (auto* c : comms) abort_comm(c, HAL_ERR_DEVICE_LOST);
}

void destroy_all_comms() {
  std::set<hal_comm_s*> comms;
  std::set<hal_request_s*> reqs;
  {
    std::lock_guard lk(g_mu);
    comms.swap(g_comms);
    reqs.swap(g_requests);
  }
  for (auto* r : reqs) {
    r->comm = nullptr;
    if (r->inner) inner().request_free(r->inner);
    delete r;
  }
  for (auto* c : comms) destroy(c);
}

const hal_coll_api_t k_sim_coll = {
    .struct_size = sizeof(hal_coll_api_t),
    .comm_create = sim_comm_create,
    .comm_destroy = sim_comm_destroy,
    .comm_abort = sim_comm_abort,
    .comm_get_async_error = sim_get_async_error,
    .post = sim_post,
    .test = sim_test,
    .wait = sim_wait,
    .request_free = sim_request_free,
    .run = sim_run,
};

}  // namespace sim_vendor
