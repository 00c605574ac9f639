// A communicator of the cpu vendor: a Gloo context over TCP and one worker
// thread that runs the posted operations in order (Gloo calls block).
#pragma once

#include <sigma/hal.h>

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

class Comm {
 public:
  // Validates args, connects to the other ranks through the bootstrap (Gloo
  // full mesh), and starts the worker. Returns a status; *out on success.
  static hal_status_t create(const hal_comm_create_args_t& args, Comm** out);
  ~Comm();  // aborts what is pending, stops the worker

  // Checks args and queues the operation. Thread-safety: one poster at a time.
  hal_status_t post(const hal_coll_args_t& args, std::shared_ptr<RequestState>& out);
  // Fails every pending and later operation with ABORTED and unblocks the
  // worker within about a second (see shutdown_sockets()).
  void abort();
  hal_status_t async_error() const { return async_error_.load(); }
  bool aborted() const { return aborted_.load(); }

 private:
  struct Op {
    hal_coll_args_t args;
    std::shared_ptr<RequestState> req;
  };
  Comm(uint32_t rank, uint32_t size);
  void worker_loop();
  void run(const hal_coll_args_t& a);  // throws on failure
  void run_local(const hal_coll_args_t& a);
  void run_all_to_allv(const hal_coll_args_t& a);
  void run_reduce_scatter(const hal_coll_args_t& a);
  void run_p2p(const hal_coll_args_t& a);
  void set_async_error(hal_status_t st);
  void shutdown_sockets();

  const uint32_t rank_, size_;
  std::shared_ptr<gloo::Context> ctx_;  // null for a world of one
  std::mutex mu_;                       // guards queue_, stop_, running_
  std::condition_variable cv_;
  std::deque<Op> queue_;
  bool stop_ = false;
  bool running_ = false;  // the worker is inside a Gloo call
  std::atomic<bool> aborted_{false};
  std::atomic<hal_status_t> async_error_{HAL_OK};
  std::vector<uint64_t> send_seq_, recv_seq_;  // per peer, worker only
  std::vector<uint8_t> scratch_;               // worker only
  std::vector<int> sockets_;  // duplicates of this comm's TCP connections, owned
  std::thread worker_;
};

}  // namespace cpu_vendor
