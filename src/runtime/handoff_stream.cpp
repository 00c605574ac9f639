#include "runtime/handoff_stream.hpp"

#include "checkpoint/view_copy.hpp"

#include <sigma/error.hpp>

#include <algorithm>
#include <cstring>
#include <utility>

namespace sigma::runtime {

namespace {

// The state travels in pieces of this size: the receiver copies each into
// the views while the next one is in flight on the sender's side.
constexpr uint64_t kPiece = 16ull << 20;

void broadcast(hal::HostStaging& staging, hal::Communicator& comm, void* data, uint64_t bytes,
               std::chrono::nanoseconds timeout) {
  staging.broadcast(comm, data, bytes, HAL_DTYPE_U8, 0, timeout);
}

}  // namespace

HandoffSender::HandoffSender(std::shared_ptr<hal::Communicator> comm, hal::PluginPtr plugin,
                             std::vector<char> state, std::chrono::nanoseconds timeout)
    : comm_(std::move(comm)), staging_(std::move(plugin)), timeout_(timeout) {
  thread_ = std::thread([this, s = std::move(state)]() mutable { run(std::move(s)); });
}

HandoffSender::~HandoffSender() {
  bool running = false;
  {
    std::lock_guard<std::mutex> lk(mu_);
    running = !done_;
    closing_ = true;
    queue_.clear();
  }
  cv_.notify_all();
  if (running) comm_->abort();  // a receiver that is gone must not hold the thread
  if (thread_.joinable()) thread_.join();
}

void HandoffSender::run(std::vector<char> state) {
  try {
    for (uint64_t at = 0; at < state.size(); at += kPiece) {
      const uint64_t n = std::min<uint64_t>(kPiece, state.size() - at);
      broadcast(staging_, *comm_, state.data() + at, n, timeout_);
      std::lock_guard<std::mutex> lk(mu_);
      sent_ += n;
    }
    state = {};  // the copy goes as soon as it is sent
    for (;;) {
      Record r;
      {
        std::unique_lock<std::mutex> lk(mu_);
        cv_.wait(lk, [&] { return !queue_.empty() || closing_; });
        if (queue_.empty()) break;
        r = std::move(queue_.front());
        queue_.pop_front();
      }
      broadcast(staging_, *comm_, &r.header, sizeof r.header, timeout_);
      if (!r.payload.empty()) broadcast(staging_, *comm_, r.payload.data(), r.payload.size(), timeout_);
      std::lock_guard<std::mutex> lk(mu_);
      sent_ += sizeof r.header + r.payload.size();
    }
  } catch (const std::exception& e) {
    std::lock_guard<std::mutex> lk(mu_);
    error_ = e.what();
  }
  {
    std::lock_guard<std::mutex> lk(mu_);
    done_ = true;
  }
  cv_.notify_all();
}

void HandoffSender::exchange(uint64_t step, const void* data, uint64_t bytes) {
  Record r;
  r.header = {StreamHeader::exchange, step, bytes, 0};
  r.payload.assign(static_cast<const char*>(data), static_cast<const char*>(data) + bytes);
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (done_) return;  // the stream failed: its error comes from finish()
    queue_.push_back(std::move(r));
  }
  cv_.notify_all();
}

void HandoffSender::rejoin(uint64_t last_step, uint64_t epoch) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (done_) return;
    queue_.push_back({{StreamHeader::rejoin, last_step, 0, epoch}, {}});
  }
  cv_.notify_all();
}

void HandoffSender::finish() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    closing_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  std::lock_guard<std::mutex> lk(mu_);
  if (error_) throw Error(Code::aborted, "runtime: the hand-off stream failed: " + *error_);
}

uint64_t HandoffSender::bytes_sent() const {
  std::lock_guard<std::mutex> lk(mu_);
  return sent_;
}

HandoffReceiver::HandoffReceiver(std::shared_ptr<hal::Communicator> comm, hal::PluginPtr plugin,
                                 std::chrono::nanoseconds timeout)
    : comm_(std::move(comm)), staging_(std::move(plugin)), timeout_(timeout) {}

void HandoffReceiver::state(const std::vector<checkpoint::TensorView>& views) {
  uint64_t total = 0;
  for (const auto& v : views) total += v.bytes();
  std::vector<uint8_t> piece(std::min(kPiece, total));
  for (uint64_t at = 0; at < total; at += kPiece) {
    const uint64_t n = std::min<uint64_t>(kPiece, total - at);
    broadcast(staging_, *comm_, piece.data(), n, timeout_);
    checkpoint::copy_out_range(piece.data(), at, n, views);
  }
}

StreamHeader HandoffReceiver::next() {
  StreamHeader h;
  broadcast(staging_, *comm_, &h, sizeof h, timeout_);
  if (h.kind != StreamHeader::exchange && h.kind != StreamHeader::rejoin)
    throw Error(Code::data_loss,
                "runtime: the hand-off stream sent a record of kind " + std::to_string(h.kind));
  return h;
}

void HandoffReceiver::payload(void* data, uint64_t bytes) {
  broadcast(staging_, *comm_, data, bytes, timeout_);
}

}  // namespace sigma::runtime
