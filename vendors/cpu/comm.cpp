#include "comm.hpp"

#include "common.hpp"
#include "reduce.hpp"
#include "store.hpp"

#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/alltoall.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/common/error.h>
#include <gloo/rendezvous/context.h>
#include <gloo/transport/tcp/device.h>
#include <gloo/transport/unbound_buffer.h>

#include <dirent.h>
#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <exception>
#include <map>
#include <optional>
#include <set>

namespace cpu_vendor {
namespace {

using std::chrono::milliseconds;

// The inode of the socket behind `fd`, read from /proc/self/fd (a readlink
// does not touch the descriptor itself), or 0 when it is not a socket.
ino_t socket_inode(int fd) {
  char link[64];
  const std::string path = "/proc/self/fd/" + std::to_string(fd);
  const ssize_t n = ::readlink(path.c_str(), link, sizeof(link) - 1);
  if (n <= 0) return 0;
  link[n] = '\0';
  unsigned long long ino = 0;
  return std::sscanf(link, "socket:[%llu]", &ino) == 1 ? static_cast<ino_t>(ino) : 0;
}

// The (fd, inode) of every socket this process has open. Comparing the set
// before and after connecting tells which sockets a communicator owns.
std::set<std::pair<int, ino_t>> open_sockets() {
  std::set<std::pair<int, ino_t>> out;
  DIR* d = ::opendir("/proc/self/fd");
  if (d == nullptr) return out;
  while (dirent* e = ::readdir(d)) {
    if (e->d_name[0] == '.') continue;
    const int fd = std::atoi(e->d_name);
    if (ino_t ino = socket_inode(fd); ino != 0) out.insert({fd, ino});
  }
  ::closedir(d);
  return out;
}

// Serialises communicator creation, so that the sockets that appear while one
// connects are that communicator's.
std::mutex g_connect_mu;

// One TCP device per process, shared by its communicators (it owns the
// event loop thread). Created on first use, dropped by the last finalize.
std::mutex g_device_mu;
std::shared_ptr<gloo::transport::Device> g_device;

std::shared_ptr<gloo::transport::Device> tcp_device() {
  std::lock_guard lk(g_device_mu);
  if (!g_device) {
    gloo::transport::tcp::attr attr;
    if (!options().iface.empty())
      attr.iface = options().iface;
    else
      attr.hostname = options().host;
    g_device = gloo::transport::tcp::CreateDevice(attr);
  }
  return g_device;
}

// Runs `f` with a pointer type whose size is the element size, so Gloo's
// typed setters compute byte counts right for every dtype.
template <typename F>
void with_elem(size_t esize, F&& f) {
  switch (esize) {
    case 1:
      f(static_cast<uint8_t*>(nullptr));
      break;
    case 2:
      f(static_cast<uint16_t*>(nullptr));
      break;
    case 4:
      f(static_cast<uint32_t*>(nullptr));
      break;
    default:
      f(static_cast<uint64_t*>(nullptr));
      break;
  }
}

bool reducing(hal_coll_op_t op) { return op == HAL_COLL_ALL_REDUCE || op == HAL_COLL_REDUCE_SCATTER; }

// Synchronous argument checks of post(): nothing is queued when they fail.
hal_status_t validate(const hal_coll_args_t& a, uint32_t rank, uint32_t size) {
  const size_t es = hal_dtype_size(a.dtype);
  if (a.op >= HAL_COLL_OP_COUNT_V1)
    return fail(HAL_ERR_INVALID_ARGUMENT, "cpu: unknown op " + std::to_string(a.op));
  if (a.op != HAL_COLL_BARRIER && es == 0)
    return fail(HAL_ERR_INVALID_ARGUMENT, "cpu: unknown dtype " + std::to_string(a.dtype));
  if (reducing(a.op) && a.reduce_op >= HAL_REDUCE_COUNT_V1)
    return fail(HAL_ERR_INVALID_ARGUMENT, "cpu: unknown reduce op " + std::to_string(a.reduce_op));
  if (a.op == HAL_COLL_BROADCAST && a.root >= size)
    return fail(HAL_ERR_INVALID_ARGUMENT,
                "cpu: root " + std::to_string(a.root) + " in a world of " + std::to_string(size));
  if (a.op == HAL_COLL_SEND || a.op == HAL_COLL_RECV) {
    if (a.peer >= size)
      return fail(HAL_ERR_INVALID_ARGUMENT,
                  "cpu: peer " + std::to_string(a.peer) + " in a world of " + std::to_string(size));
    if (a.peer == rank) return fail(HAL_ERR_NOT_SUPPORTED, "cpu: send/recv to self");
  }
  if (a.op == HAL_COLL_BARRIER) return HAL_OK;
  if (a.count > (uint64_t{1} << 56) / std::max<size_t>(es, 1))
    return fail(HAL_ERR_INVALID_ARGUMENT, "cpu: count " + std::to_string(a.count) + " is too large");
  if (a.op == HAL_COLL_ALL_TO_ALLV) {
    if (!a.send_counts || !a.send_displs || !a.recv_counts || !a.recv_displs)
      return fail(HAL_ERR_INVALID_ARGUMENT, "cpu: all_to_allv needs all four count arrays");
    uint64_t sent = 0, received = 0;
    for (uint32_t j = 0; j < size; ++j) {
      sent += a.send_counts[j];
      received += a.recv_counts[j];
    }
    if ((sent > 0 && !a.sendbuf) || (received > 0 && !a.recvbuf))
      return fail(HAL_ERR_INVALID_ARGUMENT, "cpu: NULL buffer in all_to_allv");
    if ((sent > 0 || received > 0) && a.sendbuf == a.recvbuf)
      return fail(HAL_ERR_INVALID_ARGUMENT, "cpu: all_to_allv cannot run in place");
    return HAL_OK;
  }
  const bool sends = a.op != HAL_COLL_RECV, receives = a.op != HAL_COLL_SEND;
  if (a.count > 0 && ((sends && !a.sendbuf) || (receives && !a.recvbuf)))
    return fail(HAL_ERR_INVALID_ARGUMENT, "cpu: NULL buffer with count " + std::to_string(a.count));
  if (a.op == HAL_COLL_ALL_TO_ALL && a.count > 0 && a.sendbuf == a.recvbuf)
    return fail(HAL_ERR_INVALID_ARGUMENT, "cpu: all_to_all cannot run in place");
  return HAL_OK;
}

// Ends operations that have a caller's deadline (run_to_end()) at it. Gloo bounds each of its waits, not a
// whole operation, so a slow operation made of many waits could otherwise overrun the caller's time. One
// thread for the process, started on first use; it sleeps until the earliest deadline and is woken only when
// a sooner one arrives (operations usually end long before theirs, so most calls cost two uncontended locks).
class Watchdog {
 public:
  ~Watchdog() { stop(); }  // a process that exits without finalize
  struct Due {
    Comm* comm;
    bool fired = false;
  };
  using Entry = std::multimap<uint64_t, Due>::iterator;
  Entry add(uint64_t deadline_ns, Comm* c) {
    std::lock_guard lk(mu_);
    if (!thread_.joinable()) {
      stop_ = false;
      thread_ = std::thread([this] { loop(); });
    }
    auto it = due_.emplace(deadline_ns, Due{c});
    if (deadline_ns < sleeping_until_) cv_.notify_one();
    return it;
  }
  // Returns whether the deadline had fired.
  bool remove(Entry it) {
    std::lock_guard lk(mu_);
    const bool fired = it->second.fired;
    due_.erase(it);
    return fired;
  }
  void stop() {
    {
      std::lock_guard lk(mu_);
      stop_ = true;
      cv_.notify_one();
    }
    if (thread_.joinable()) thread_.join();
  }

 private:
  void loop() {
    std::unique_lock lk(mu_);
    while (!stop_) {
      const uint64_t now = now_ns();
      sleeping_until_ = UINT64_MAX;
      for (auto& [deadline, d] : due_) {  // the owner erases its entry
        if (d.fired) continue;
        if (deadline > now) {
          sleeping_until_ = deadline;
          break;
        }
        d.fired = true;
        d.comm->expire();
      }
      if (sleeping_until_ == UINT64_MAX)
        cv_.wait(lk);
      else
        cv_.wait_for(lk, std::chrono::nanoseconds(sleeping_until_ - now));
    }
    sleeping_until_ = UINT64_MAX;
  }

  std::mutex mu_;  // guards all below
  std::condition_variable cv_;
  std::multimap<uint64_t, Due> due_;
  uint64_t sleeping_until_ = UINT64_MAX;
  bool stop_ = false;
  std::thread thread_;
};

Watchdog g_watchdog;

}  // namespace

void reset_tcp_device() {
  std::lock_guard lk(g_device_mu);
  g_device.reset();
}

void stop_deadline_watchdog() { g_watchdog.stop(); }

void Comm::expire() { shutdown_sockets(); }

void RequestState::complete(hal_status_t st, std::string why) {
  std::lock_guard lk(mu);
  if (status != HAL_IN_PROGRESS) return;
  status = st;
  message = std::move(why);
  cv.notify_all();
}

Comm::Comm(uint32_t rank, uint32_t size) : rank_(rank), size_(size), send_seq_(size, 0), recv_seq_(size, 0) {}

hal_status_t Comm::create(const hal_comm_create_args_t& a, Comm** out) {
  if (a.world_size == 0 || a.rank >= a.world_size)
    return fail(HAL_ERR_INVALID_ARGUMENT,
                "cpu: rank " + std::to_string(a.rank) + " of world " + std::to_string(a.world_size));
  if (hal_status_t st = check_device(a.device); st != HAL_OK) return st;
  if (a.world_size > 1 && (a.bootstrap == nullptr || a.bootstrap->struct_size < HAL_BOOTSTRAP_V1_0_SIZE))
    return fail(HAL_ERR_INVALID_ARGUMENT, "cpu: a world of several ranks needs a bootstrap");
  std::unique_ptr<Comm> c(new Comm(a.rank, a.world_size));
  if (a.world_size > 1) {
    const auto timeout =
        milliseconds(std::max<uint64_t>(1, std::min<uint64_t>(a.timeout_ns / 1000000, 1ull << 40)));
    try {
      auto dev = tcp_device();
      std::lock_guard connect_lk(g_connect_mu);
      const auto before = open_sockets();
      auto ctx = std::make_shared<gloo::rendezvous::Context>(static_cast<int>(a.rank),
                                                             static_cast<int>(a.world_size));
      {
        auto store = make_gloo_store(*a.bootstrap, timeout);  // closed before the sockets are counted
        ctx->setTimeout(timeout);
        ctx->connectFullMesh(*store, dev);
      }
      ctx->setTimeout(milliseconds(options().op_timeout_ms));
      // Keep a duplicate of each of this communicator's sockets: shutting a
      // duplicate down ends the connection under Gloo's own descriptor, and
      // a descriptor we own cannot be closed and reused behind our back.
      for (const auto& [fd, ino] : open_sockets()) {
        if (before.count({fd, ino})) continue;
        const int dup = ::fcntl(fd, F_DUPFD_CLOEXEC, 0);
        if (dup < 0) continue;
        if (socket_inode(dup) == ino)
          c->sockets_.push_back(dup);
        else
          ::close(dup);
      }
      c->ctx_ = ctx;
    } catch (const std::exception& e) {
      const std::string what = e.what();
      const bool timed_out =
          what.find("imeout") != std::string::npos || what.find("imed out") != std::string::npos;
      return fail(timed_out ? HAL_ERR_TIMEOUT : HAL_ERR_UNAVAILABLE,
                  "cpu: connecting rank " + std::to_string(a.rank) + " of " + std::to_string(a.world_size) +
                      " failed: " + what);
    }
  }
  c->worker_ = std::thread([p = c.get()] { p->worker_loop(); });
  *out = c.release();
  return HAL_OK;
}

Comm::~Comm() {
  bool busy;
  {
    std::lock_guard lk(mu_);
    busy = running_ || !queue_.empty();
  }
  if (busy) abort();
  {
    std::lock_guard lk(mu_);
    stop_ = true;
    work_cv_.notify_all();
  }
  if (worker_.joinable()) worker_.join();
  ctx_.reset();  // Gloo closes its descriptors; ours keep the sockets open until:
  for (int fd : sockets_) ::close(fd);
}

hal_status_t Comm::admit(const hal_coll_args_t& args) const {
  if (hal_status_t st = validate(args, rank_, size_); st != HAL_OK) return st;
  if (aborted_) return fail(HAL_ERR_ABORTED, "cpu: the communicator was aborted");
  if (hal_status_t err = async_error_.load(); err != HAL_OK)
    return fail(err, "cpu: the communicator failed earlier and cannot be used");
  return HAL_OK;
}

hal_status_t Comm::post(const hal_coll_args_t& args, std::shared_ptr<RequestState>& out) {
  if (hal_status_t st = admit(args); st != HAL_OK) return st;
  auto req = std::make_shared<RequestState>();
  {
    std::lock_guard lk(mu_);
    queue_.push_back(Op{args, req, 0});
    queue_.back().args.struct_size = sizeof(hal_coll_args_t);
    work_cv_.notify_one();
  }
  out = std::move(req);
  return HAL_OK;
}

hal_status_t Comm::run_to_end(const hal_coll_args_t& args, uint64_t timeout_ns) {
  if (hal_status_t st = admit(args); st != HAL_OK) return st;
  const uint64_t start = now_ns();
  Op op{args, std::make_shared<RequestState>(), timeout_ns > UINT64_MAX - start ? 0 : start + timeout_ns};
  op.args.struct_size = sizeof(hal_coll_args_t);
  bool here = false;
  {
    std::lock_guard lk(mu_);
    if (!running_ && queue_.empty()) {
      running_ = true;  // nothing earlier to wait for: run it on this thread
      here = true;
    } else {
      queue_.push_back(op);  // behind what was posted before, in order
      work_cv_.notify_one();
    }
  }
  if (here) execute(op);
  RequestState& r = *op.req;
  std::unique_lock lk(r.mu);
  auto done = [&] { return r.status != HAL_IN_PROGRESS; };
  if (op.deadline_ns == 0)
    r.cv.wait(lk, done);
  else
    r.cv.wait_for(lk, std::chrono::nanoseconds(op.deadline_ns - std::min(op.deadline_ns, now_ns())), done);
  if (r.status == HAL_IN_PROGRESS) {
    // Still queued or running on the worker: it must not be left behind
    // with the caller's buffers, so the communicator goes (bounded).
    lk.unlock();
    set_async_error(HAL_ERR_TIMEOUT);
    abort();
    lk.lock();
    r.cv.wait_for(lk, std::chrono::seconds(5), done);
    return fail(HAL_ERR_TIMEOUT, "cpu: the operation did not finish within " + std::to_string(timeout_ns) +
                                     " ns; the communicator was aborted");
  }
  const hal_status_t st = r.status;
  const std::string why = r.message;
  lk.unlock();
  if (st == HAL_ERR_TIMEOUT) abort();  // ran out of time inside Gloo
  if (st < 0) return fail(st, "cpu: the operation failed: " + why);
  return HAL_OK;
}

void Comm::set_async_error(hal_status_t st) {
  hal_status_t expected = HAL_OK;
  async_error_.compare_exchange_strong(expected, st);
}

// Gloo has no abort, and closing a pair does not wake an operation waiting
// on it. Shutting down the pairs' sockets does: Gloo's event loop reads the
// end of stream, fails every send and receive pending on the pair, and the
// waiting collective throws at once. The peers see the same and fail fast.
// The descriptors are our own duplicates (see create()).
void Comm::shutdown_sockets() {
  for (int fd : sockets_) ::shutdown(fd, SHUT_RDWR);
}

void Comm::wake_p2p() {
  std::lock_guard lk(p2p_mu_);
  for (auto* b : p2p_) {
    b->abortWaitSend();
    b->abortWaitRecv();
  }
}

// The buffers of one operation, visible to wake_p2p() while it runs. When
// the operation fails (the guard goes while an exception unwinds), other
// transfers of it may still be posted on Gloo's pairs, whose event loop
// would go on receiving into the caller's memory (and failing the buffers)
// after the operation returned: the pairs are closed first, under their
// own locks, and the buffers, declared before the guard, go after them.
// The communicator is finished after a failure anyway.
class Comm::InFlight {
 public:
  InFlight(Comm& c, std::vector<gloo::transport::UnboundBuffer*> bufs)
      : c_(c), unwinding_(std::uncaught_exceptions()) {
    {
      std::lock_guard lk(c_.p2p_mu_);
      c_.p2p_ = std::move(bufs);
    }
    if (c_.aborted_) {  // abort() came before the buffers were visible
      clear();
      throw gloo::IoException("aborted");
    }
  }
  ~InFlight() {
    clear();
    if (std::uncaught_exceptions() > unwinding_) c_.close_pairs();
  }
  InFlight(const InFlight&) = delete;
  InFlight& operator=(const InFlight&) = delete;

 private:
  void clear() {
    std::lock_guard lk(c_.p2p_mu_);
    c_.p2p_.clear();
  }
  Comm& c_;
  const int unwinding_;
};

void Comm::close_pairs() noexcept {
  try {
    if (ctx_) ctx_->closeConnections();
  } catch (const std::exception&) {
    // A pair that cannot close is already failed; its loop is done with it.
  }
}

// Gloo's collectives post their sends on the output buffer or the input:
// made here, abort() can wake a send in flight. A pair's failure reaches
// the receives posted on it and the sends not yet matched, not a send
// being written: that one would wait for Gloo's timeout.
std::unique_ptr<gloo::transport::UnboundBuffer> Comm::watch(void* p, size_t bytes, Watched& into) {
  auto b = ctx_->createUnboundBuffer(p, bytes);
  into.push_back(b.get());
  return b;
}

void Comm::abort() {
  const bool first = !aborted_.exchange(true);
  std::deque<Op> dropped;
  {
    std::unique_lock lk(mu_);
    if (first) {
      set_async_error(HAL_ERR_ABORTED);
      dropped.swap(queue_);
      // Also tells the peers at once: their pending operations fail now
      // instead of waiting for their timeout.
      shutdown_sockets();
    }
    // Bounded: the signalled pairs fail the running call at once. A wake
    // ends one wait only, and a collective whose wait was ended goes on to
    // its next (which its failed pair then refuses): woken until it ends.
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(1);
    do {
      wake_p2p();
    } while (!idle_cv_.wait_for(lk, std::chrono::milliseconds(10), [&] { return !running_; }) &&
             std::chrono::steady_clock::now() < until);
  }
  for (auto& op : dropped) op.req->complete(HAL_ERR_ABORTED, "aborted before it ran");
}

void Comm::worker_loop() {
  for (;;) {
    Op op;
    {
      std::unique_lock lk(mu_);
      // Not while run_to_end() runs an operation on its caller's thread.
      work_cv_.wait(lk, [&] { return stop_ || (!queue_.empty() && !running_); });
      if (queue_.empty()) return;
      op = std::move(queue_.front());
      queue_.pop_front();
      running_ = true;
    }
    execute(op);
  }
}

void Comm::execute(Op& op) {
  hal_status_t st = HAL_OK;
  std::string why;
  if (aborted_) {
    st = HAL_ERR_ABORTED;
    why = "aborted before it ran";
  } else if (hal_status_t err = async_error_.load(); err != HAL_OK) {
    st = err;
    why = "the communicator failed earlier";
  } else {
    // Gloo's own bound on each wait: the op timeout, or less when the
    // caller's time runs out sooner (run_to_end()).
    auto bound = milliseconds(options().op_timeout_ms);
    if (op.deadline_ns != 0) {
      const uint64_t left_ms = (op.deadline_ns - std::min(op.deadline_ns, now_ns()) + 999999) / 1000000;
      bound = std::min(bound, milliseconds(std::max<uint64_t>(1, left_ms)));
    }
    if (ctx_) ctx_->setTimeout(bound);
    // The watchdog ends the whole operation at the deadline (see Watchdog).
    std::optional<Watchdog::Entry> watched;
    if (op.deadline_ns != 0 && ctx_) watched = g_watchdog.add(op.deadline_ns, this);
    try {
      run(op.args);
    } catch (const gloo::IoException& e) {
      st = aborted_ ? HAL_ERR_ABORTED : HAL_ERR_REMOTE_ERROR;
      why = e.what();
    } catch (const std::exception& e) {
      st = aborted_ ? HAL_ERR_ABORTED : HAL_ERR_INTERNAL;
      why = e.what();
    }
    // Woken by the abort, a collective may run on to its end over waits
    // that did not finish: what it left in the buffers is not a result.
    if (st == HAL_OK && aborted_) {
      st = HAL_ERR_ABORTED;
      why = "aborted while it ran";
    }
    // Fired even as the operation ended well: its sockets are shut all
    // the same, so it is a timeout and the communicator goes.
    const bool fired = watched && g_watchdog.remove(*watched);
    if (!aborted_ && (fired || (st != HAL_OK && op.deadline_ns != 0 && now_ns() >= op.deadline_ns))) {
      why = st == HAL_OK ? "reached its deadline as it finished" : "ran out of the caller's time: " + why;
      st = HAL_ERR_TIMEOUT;
    }
    // A Gloo context that threw has closed pairs: nothing later can run.
    // Closing every connection passes the failure on to all peers, so a
    // rank blocked on a healthy peer that is itself stuck does not wait
    // for its timeout (one death fails the whole group in milliseconds).
    if (st != HAL_OK) {
      set_async_error(st);
      shutdown_sockets();
    }
    wake_p2p();
  }
  {
    std::lock_guard lk(mu_);
    running_ = false;
    idle_cv_.notify_all();
    if (!queue_.empty()) work_cv_.notify_one();
  }
  op.req->complete(st, why);
}

void Comm::run(const hal_coll_args_t& a) {
  if (size_ == 1) return run_local(a);
  const size_t es = hal_dtype_size(a.dtype);
  auto* send = const_cast<void*>(a.sendbuf);
  switch (a.op) {
    case HAL_COLL_ALL_REDUCE: {
      if (a.count == 0) return;
      gloo::AllreduceOptions o(ctx_);
      o.setAlgorithm(gloo::AllreduceOptions::Algorithm::RING);
      Watched bufs;
      with_elem(es, [&](auto* t) {
        using T = std::remove_pointer_t<decltype(t)>;
        if (a.sendbuf != a.recvbuf) o.template setInput<T>(watch(send, a.count * es, bufs));
        o.template setOutput<T>(watch(a.recvbuf, a.count * es, bufs));
      });
      ReduceFn fn = reduce_function(a.dtype, a.reduce_op);
      o.setReduceFunction([fn](void* c, const void* x, const void* y, size_t n) { fn(c, x, y, n); });
      const InFlight in_flight(*this, std::move(bufs));
      gloo::allreduce(o);
      if (a.reduce_op == HAL_REDUCE_AVG) divide_by(a.dtype, a.recvbuf, a.count, size_);
      return;
    }
    case HAL_COLL_ALL_GATHER: {
      if (a.count == 0) return;
      gloo::AllgatherOptions o(ctx_);
      const bool in_place = static_cast<const uint8_t*>(a.recvbuf) + rank_ * a.count * es == a.sendbuf;
      Watched bufs;
      with_elem(es, [&](auto* t) {
        using T = std::remove_pointer_t<decltype(t)>;
        if (!in_place) o.template setInput<T>(watch(send, a.count * es, bufs));
        o.template setOutput<T>(watch(a.recvbuf, a.count * size_ * es, bufs));
      });
      const InFlight in_flight(*this, std::move(bufs));
      gloo::allgather(o);
      return;
    }
    case HAL_COLL_REDUCE_SCATTER:
      return run_reduce_scatter(a);
    case HAL_COLL_ALL_TO_ALL: {
      if (a.count == 0) return;
      gloo::AlltoallOptions o(ctx_);
      Watched bufs;
      with_elem(es, [&](auto* t) {
        using T = std::remove_pointer_t<decltype(t)>;
        o.template setInput<T>(watch(send, a.count * size_ * es, bufs));
        o.template setOutput<T>(watch(a.recvbuf, a.count * size_ * es, bufs));
      });
      const InFlight in_flight(*this, std::move(bufs));
      gloo::alltoall(o);
      return;
    }
    case HAL_COLL_ALL_TO_ALLV:
      return run_all_to_allv(a);
    case HAL_COLL_BROADCAST: {
      if (a.count == 0) return;
      gloo::BroadcastOptions o(ctx_);
      o.setRoot(static_cast<int>(a.root));
      Watched bufs;
      with_elem(es, [&](auto* t) {
        using T = std::remove_pointer_t<decltype(t)>;
        if (rank_ == a.root && a.sendbuf != a.recvbuf)
          o.template setInput<T>(watch(send, a.count * es, bufs));
        o.template setOutput<T>(watch(a.recvbuf, a.count * es, bufs));
      });
      const InFlight in_flight(*this, std::move(bufs));
      gloo::broadcast(o);
      return;
    }
    case HAL_COLL_BARRIER: {
      gloo::BarrierOptions o(ctx_);
      gloo::barrier(o);
      return;
    }
    case HAL_COLL_SEND:
    case HAL_COLL_RECV:
      return run_p2p(a);
    default:
      throw std::logic_error("unreachable op");
  }
}

// A world of one: every op moves data locally (or not at all).
void Comm::run_local(const hal_coll_args_t& a) {
  const size_t es = hal_dtype_size(a.dtype);
  if (a.op == HAL_COLL_BARRIER) return;
  if (a.op == HAL_COLL_ALL_TO_ALLV) {
    if (a.send_counts[0] > 0)
      std::memmove(static_cast<uint8_t*>(a.recvbuf) + a.recv_displs[0] * es,
                   static_cast<const uint8_t*>(a.sendbuf) + a.send_displs[0] * es, a.send_counts[0] * es);
    return;
  }
  if (a.count > 0 && a.sendbuf != a.recvbuf) std::memmove(a.recvbuf, a.sendbuf, a.count * es);
}

// Alltoall of the input blocks, then the local reduction of the blocks each
// rank received: the same bytes on the wire as a ring reduce-scatter.
void Comm::run_reduce_scatter(const hal_coll_args_t& a) {
  if (a.count == 0) return;
  const size_t es = hal_dtype_size(a.dtype);
  scratch_.resize(a.count * size_ * es);
  gloo::AlltoallOptions o(ctx_);
  Watched bufs;
  with_elem(es, [&](auto* t) {
    using T = std::remove_pointer_t<decltype(t)>;
    o.template setInput<T>(watch(const_cast<void*>(a.sendbuf), a.count * size_ * es, bufs));
    o.template setOutput<T>(watch(scratch_.data(), a.count * size_ * es, bufs));
  });
  const InFlight in_flight(*this, std::move(bufs));
  gloo::alltoall(o);
  reduce_blocks(a.dtype, a.reduce_op, a.recvbuf, scratch_.data(), a.count, size_);
  if (a.reduce_op == HAL_REDUCE_AVG) divide_by(a.dtype, a.recvbuf, a.count, size_);
}

// Each block goes straight from its place in the send buffer to its place
// in the peer's receive buffer, whatever the displacements: Gloo's own
// alltoallv wants the blocks packed in rank order, which would cost a copy
// of both buffers for any other layout (MoE dispatch leaves its own block
// out, so its layout never is). The pairing is Gloo's: step i sends to rank
// + i and receives from rank - i, every transfer posted before any wait.
// Zero-length blocks are not sent: both sides' counts agree (the HAL's
// contract), so both skip them.
void Comm::run_all_to_allv(const hal_coll_args_t& a) {
  const uint64_t es = hal_dtype_size(a.dtype);
  auto* in = static_cast<uint8_t*>(const_cast<void*>(a.sendbuf));
  auto* out = static_cast<uint8_t*>(a.recvbuf);
  if (a.send_counts[rank_] > 0)
    std::memcpy(out + a.recv_displs[rank_] * es, in + a.send_displs[rank_] * es, a.send_counts[rank_] * es);
  if (size_ == 1) return;
  uint64_t in_end = 1, out_end = 1;  // extents; Gloo wants a buffer even when nothing moves
  for (uint32_t j = 0; j < size_; ++j) {
    if (j == rank_) continue;
    if (a.send_counts[j] > 0) in_end = std::max(in_end, (a.send_displs[j] + a.send_counts[j]) * es);
    if (a.recv_counts[j] > 0) out_end = std::max(out_end, (a.recv_displs[j] + a.recv_counts[j]) * es);
  }
  uint8_t dummy[2] = {0, 0};
  auto send = ctx_->createUnboundBuffer(in ? in : dummy, in_end);
  auto recv = ctx_->createUnboundBuffer(out ? out : dummy + 1, out_end);
  const InFlight in_flight(*this, {send.get(), recv.get()});
  constexpr uint64_t kSlot = uint64_t{0x5B} << 56;  // a range no other operation uses
  int sends = 0, recvs = 0;
  for (uint32_t i = 1; i < size_; ++i) {
    const uint32_t to = (rank_ + i) % size_, from = (rank_ + size_ - i) % size_;
    if (a.send_counts[to] > 0) {
      send->send(static_cast<int>(to), kSlot, a.send_displs[to] * es, a.send_counts[to] * es);
      ++sends;
    }
    if (a.recv_counts[from] > 0) {
      recv->recv(static_cast<int>(from), kSlot, a.recv_displs[from] * es, a.recv_counts[from] * es);
      ++recvs;
    }
  }
  const auto timeout = ctx_->getTimeout();
  for (int k = 0; k < sends; ++k)
    if (!send->waitSend(timeout)) throw gloo::IoException("all_to_allv: send aborted");
  for (int k = 0; k < recvs; ++k)
    if (!recv->waitRecv(timeout)) throw gloo::IoException("all_to_allv: receive aborted");
}

// Matched in posting order per peer: the k-th send to a peer meets that
// peer's k-th receive from us, in a slot range collectives never use.
void Comm::run_p2p(const hal_coll_args_t& a) {
  const size_t bytes = a.count * hal_dtype_size(a.dtype);
  const uint32_t peer = a.peer;
  constexpr uint64_t kP2PSlotBase = uint64_t{0x5A} << 56;
  const bool send = a.op == HAL_COLL_SEND;
  const uint64_t slot = kP2PSlotBase | (send ? send_seq_[peer]++ : recv_seq_[peer]++);
  if (bytes == 0) return;
  auto buf = ctx_->createUnboundBuffer(send ? const_cast<void*>(a.sendbuf) : a.recvbuf, bytes);
  const InFlight in_flight(*this, {buf.get()});
  if (send) {
    buf->send(static_cast<int>(peer), slot);
    if (!buf->waitSend(ctx_->getTimeout())) throw gloo::IoException("send aborted");
  } else {
    buf->recv(static_cast<int>(peer), slot);
    if (!buf->waitRecv(ctx_->getTimeout())) throw gloo::IoException("recv aborted");
  }
}

}  // namespace cpu_vendor
