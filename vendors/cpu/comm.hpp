// A communicator of the cpu vendor: a Gloo context over TCP and one worker
// thread that runs the posted operations in order (Gloo calls block). A
// blocking run (hal_coll_run_fn) with nothing queued runs on the caller's
// thread instead.
#pragma once

#include <sigma/hal.h>

#include <gloo/transport/unbound_buffer.h>

#include <atomic>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace gloo {
class Context;
}

namespace cpu_vendor {

// Completion state of one request, shared by the handle and the worker.
struct RequestState {
  std::mutex mu;
  std::condition_variable cv;
  hal_status_t status = HAL_IN_PROGRESS;  // guarded by mu
  std::string message;                    // why it failed; guarded by mu
  void complete(hal_status_t st, std::string why);
};

// Drops the process's TCP device and stops the deadline watchdog (the last
// finalize; the plugin may be unloaded after it).
void reset_tcp_device();
void stop_deadline_watchdog();

class Comm {
 public:
  // Validates args, connects to the other ranks through the bootstrap (Gloo
  // full mesh), and starts the worker. Returns a status; *out on success.
  static hal_status_t create(const hal_comm_create_args_t& args, Comm** out);
  ~Comm();  // aborts what is pending, stops the worker

  // Checks args and queues the operation. Thread-safety: one poster at a time.
  hal_status_t post(const hal_coll_args_t& args, std::shared_ptr<RequestState>& out);
  // hal_coll_run_fn: runs the operation on the calling thread when nothing
  // is queued or running, else queues it and waits; past timeout_ns the
  // communicator is aborted (async error TIMEOUT). Sets the thread's last
  // error on failure. Thread-safety: as post().
  hal_status_t run_to_end(const hal_coll_args_t& args, uint64_t timeout_ns);
  // Fails every pending and later operation with ABORTED and unblocks the
  // worker within about a second (see shutdown_sockets()).
  void abort();
  // Called by the deadline watchdog when an operation of run_to_end() passed
  // its deadline: ends it (the sockets are shut down).
  void expire();
  hal_status_t async_error() const { return async_error_.load(); }
  bool aborted() const { return aborted_.load(); }

 private:
  struct Op {
    hal_coll_args_t args;
    std::shared_ptr<RequestState> req;
    uint64_t deadline_ns;  // steady clock; 0: only the op timeout bounds it
  };
  hal_status_t admit(const hal_coll_args_t& args) const;  // post's checks
  Comm(uint32_t rank, uint32_t size);
  void worker_loop();
  void execute(Op& op);                // runs it (caller set running_), completes the request
  void run(const hal_coll_args_t& a);  // throws on failure
  void run_local(const hal_coll_args_t& a);
  void run_all_to_allv(const hal_coll_args_t& a);
  void run_reduce_scatter(const hal_coll_args_t& a);
  void run_p2p(const hal_coll_args_t& a);
  void set_async_error(hal_status_t st);
  void shutdown_sockets();
  void wake_p2p();              // fails the sends and receives in flight, if any
  void close_pairs() noexcept;  // every pair closed: Gloo's loop touches none of its buffers again
  // Registers `bufs` with wake_p2p() until the returned guard goes; throws
  // if the communicator was aborted before.
  class InFlight;
  using Watched = std::vector<gloo::transport::UnboundBuffer*>;
  // A buffer for Gloo over [p, p + bytes), added to `into` for an InFlight.
  std::unique_ptr<gloo::transport::UnboundBuffer> watch(void* p, size_t bytes, Watched& into);

  const uint32_t rank_, size_;
  std::shared_ptr<gloo::Context> ctx_;  // null for a world of one
  std::mutex mu_;                       // guards queue_, stop_, running_
  std::condition_variable work_cv_;     // the worker: queued work or stop
  std::condition_variable idle_cv_;     // abort(): running_ went false
  std::deque<Op> queue_;
  bool stop_ = false;
  bool running_ = false;  // an operation runs (on the worker or in run_to_end())
  std::atomic<bool> aborted_{false};
  std::atomic<hal_status_t> async_error_{HAL_OK};
  std::vector<uint64_t> send_seq_, recv_seq_;  // per peer, whoever holds running_
  std::vector<uint8_t> scratch_;               // whoever holds running_
  std::vector<int> sockets_;                   // duplicates of this comm's TCP connections, owned
  // The buffers whose sends or receives are in flight (a point-to-point
  // operation's one, a collective's input and output): abort() wakes their
  // waits (a send waiting for a dead peer's receive, or being written when
  // its pair failed, is not woken by the sockets' shutdown).
  std::mutex p2p_mu_;
  std::vector<gloo::transport::UnboundBuffer*> p2p_;
  std::thread worker_;
};

}  // namespace cpu_vendor
