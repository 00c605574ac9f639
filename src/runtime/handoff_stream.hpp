// Contained recovery's hand-off stream, over a communicator of one donor
// rank (rank 0, the root of every broadcast) and its counterparts in the
// rejoining replicas. The donor's state goes first, then a record for each
// later data-parallel exchange the donor carries out: its step and the
// reduced bytes, which the receivers replay; a notice names the step at
// whose end the stream stops and the live set re-forms with the receivers
// in. The sender runs on a thread of its own, so the donor steps on while
// the (slow) state travels; the receiver reads on the training thread.
#pragma once

#include <sigma/checkpoint.hpp>
#include <sigma/hal.hpp>
#include <sigma/host_staging.hpp>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace sigma::runtime {

// A piece of the state's image as it travels: bytes [at, at + bytes), and
// the view that holds all of it at `offset` (-1: a piece of a run of small
// views).
struct HandoffPiece {
  uint64_t at = 0;
  uint64_t bytes = 0;
  int64_t view = -1;
  uint64_t offset = 0;
};

// How the image of `views` is cut, from their sizes alone, so both sides
// cut alike: a view of 1 MiB or more travels in pieces of its own of at
// most 16 MiB (a receiver lands them in the view itself); runs of smaller
// views travel together in pieces of at most 16 MiB. Pure.
std::vector<HandoffPiece> handoff_pieces(const std::vector<checkpoint::TensorView>& views);

// One record's header, as it travels.
struct StreamHeader {
  enum Kind : uint64_t { exchange = 0, rejoin = 1 };
  uint64_t kind = exchange;
  uint64_t step = 0;   // exchange: the donor's step; rejoin: the last step streamed
  uint64_t bytes = 0;  // exchange: the reduced bytes that follow
  uint64_t epoch = 0;  // rejoin: the epoch the live set re-forms as
};

// The donor's side. Thread-safety: every member on the training thread;
// the stream's own thread only sends.
class HandoffSender {
 public:
  // Copies the donor's state (`views`) and sends the copy. Where the
  // plugin's memory is host-addressable the copy is in its memory and each
  // piece is posted as soon as it is copied (the copy and the wire
  // overlap); elsewhere it is staged piece by piece after the copy.
  // Returns once the copy is whole: the views may change from then on.
  HandoffSender(std::shared_ptr<hal::Communicator> comm, hal::PluginPtr plugin,
                const std::vector<checkpoint::TensorView>& views, std::chrono::nanoseconds timeout);
  // Sends `image`, a copy of the state of `views` (their layout; their
  // bytes are not read) already in the plugin's host-addressable memory (the
  // memory tier's snapshot of the boundary step: MemoryTier::own_image),
  // without copying it again; no one may write into it meanwhile. Returns
  // at once.
  HandoffSender(std::shared_ptr<hal::Communicator> comm, hal::PluginPtr plugin,
                std::shared_ptr<const hal::Buffer> image, const std::vector<checkpoint::TensorView>& views,
                std::chrono::nanoseconds timeout);
  // Aborts the stream if it still runs (a hand-off made void) and joins.
  ~HandoffSender();
  HandoffSender(const HandoffSender&) = delete;
  HandoffSender& operator=(const HandoffSender&) = delete;

  // Queues a reduced exchange of `step` (copied). Never blocks.
  void exchange(uint64_t step, const void* data, uint64_t bytes);
  // Queues the rejoin notice: the stream stops after `last_step`, the live
  // set re-forms as `epoch`. Never blocks.
  void rejoin(uint64_t last_step, uint64_t epoch);
  // Waits until everything queued is sent; throws the stream's error.
  void finish();
  // Bytes sent so far and seconds since the start (for the journal).
  uint64_t bytes_sent() const;

 private:
  struct Record {
    StreamHeader header;
    std::vector<char> payload;
  };
  void run();
  void send_state();

  std::shared_ptr<hal::Communicator> comm_;
  hal::PluginPtr plugin_;
  hal::HostStaging staging_;
  std::chrono::nanoseconds timeout_;
  std::vector<HandoffPiece> pieces_;  // the state's cut
  uint64_t state_bytes_ = 0;
  uint64_t copied_ = 0;  // guarded by mu_: bytes of the image copied so far (sent as they are)
  std::shared_ptr<const hal::Buffer> image_;  // the state's copy in the plugin's memory (host-addressable)
  std::vector<char> host_image_;              // ... or in host memory, staged
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Record> queue_;          // guarded by mu_
  bool closing_ = false;              // guarded by mu_: finish() waits for the queue to drain
  bool done_ = false;                 // guarded by mu_: the thread has ended
  std::optional<std::string> error_;  // guarded by mu_
  uint64_t sent_ = 0;                 // guarded by mu_
  std::thread thread_;
};

// The receivers' side. Thread-safety: the training thread only.
class HandoffReceiver {
 public:
  HandoffReceiver(std::shared_ptr<hal::Communicator> comm, hal::PluginPtr plugin,
                  std::chrono::nanoseconds timeout);
  // The donor's state into `views` (the donor's layout). Where the plugin's
  // memory is host-addressable every piece is posted at once, a view's own
  // pieces landing in the view itself (host memory) and the runs of small
  // views in one scratch buffer, copied out as each arrives; elsewhere
  // each piece is staged in turn. Blocks until it has arrived.
  void state(const std::vector<checkpoint::TensorView>& views);
  // The next record's header; blocks until the donor sends it.
  StreamHeader next();
  // An exchange record's bytes into `data`.
  void payload(void* data, uint64_t bytes);

 private:
  std::shared_ptr<hal::Communicator> comm_;
  hal::PluginPtr plugin_;
  hal::HostStaging staging_;
  std::chrono::nanoseconds timeout_;
};

}  // namespace sigma::runtime
