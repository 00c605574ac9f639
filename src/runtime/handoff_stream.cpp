#include "runtime/handoff_stream.hpp"

#include "checkpoint/shard.hpp"
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

namespace {

uint64_t total_bytes(const std::vector<checkpoint::TensorView>& views) {
  uint64_t n = 0;
  for (const auto& v : views) n += v.bytes();
  return n;
}

// Every piece of [base, base + bytes) broadcast from rank 0, posted at
// once; `arrived(at, n)` is called for each piece in order as it is done.
template <typename Arrived>
void broadcast_pieces(hal::Communicator& comm, uint8_t* base, uint64_t bytes,
                      std::chrono::nanoseconds timeout, Arrived&& arrived) {
  std::vector<hal::Request> pieces;
  for (uint64_t at = 0; at < bytes; at += kPiece) {
    const uint64_t n = std::min(kPiece, bytes - at);
    pieces.push_back(comm.post(hal::coll_args(HAL_COLL_BROADCAST, HAL_DTYPE_U8, n, base + at, base + at)));
  }
  for (size_t i = 0; i < pieces.size(); ++i) {
    if (!pieces[i].wait(timeout)) {
      comm.abort();  // the rest must not land in memory that goes
      throw Error(Code::timeout, "runtime: a hand-off piece did not arrive in time");
    }
    const uint64_t at = i * kPiece;
    arrived(at, std::min(kPiece, bytes - at));
  }
}

}  // namespace

HandoffSender::HandoffSender(std::shared_ptr<hal::Communicator> comm, hal::PluginPtr plugin,
                             const std::vector<checkpoint::TensorView>& views,
                             std::chrono::nanoseconds timeout)
    : comm_(std::move(comm)), plugin_(plugin), staging_(std::move(plugin)), timeout_(timeout) {
  const uint64_t bytes = state_bytes_ = total_bytes(views);
  if (!plugin_->host_addressable(0)) {
    host_image_.resize(bytes);
    checkpoint::copy_in(reinterpret_cast<uint8_t*>(host_image_.data()), bytes, views);
    copied_ = bytes;
    thread_ = std::thread([this] { run(); });
    return;
  }
  image_ = std::make_shared<hal::Buffer>(plugin_, 0, std::max<uint64_t>(bytes, 1));
  auto* base = static_cast<uint8_t*>(image_->data());
  checkpoint::shard::offer_huge_pages(base, bytes);  // fresh memory: fewer faults
  thread_ = std::thread([this] { run(); });
  for (uint64_t at = 0; at < bytes; at += kPiece) {
    const uint64_t n = std::min(kPiece, bytes - at);
    checkpoint::copy_in_piece(base + at, at, n, views);
    {
      std::lock_guard<std::mutex> lk(mu_);
      copied_ = at + n;
    }
    cv_.notify_all();
  }
}

HandoffSender::HandoffSender(std::shared_ptr<hal::Communicator> comm, hal::PluginPtr plugin,
                             std::shared_ptr<const hal::Buffer> image, uint64_t bytes,
                             std::chrono::nanoseconds timeout)
    : comm_(std::move(comm)),
      plugin_(plugin),
      staging_(std::move(plugin)),
      timeout_(timeout),
      state_bytes_(bytes),
      copied_(bytes),
      image_(std::move(image)) {
  if (!image_ || image_->size() < bytes || !plugin_->host_addressable(0))
    throw Error(Code::invalid_argument, "runtime: a hand-off image must hold the state's " +
                                            std::to_string(bytes) + " bytes in host-addressable memory");
  thread_ = std::thread([this] { run(); });
}

// The state's pieces, each posted once it is copied (the thread waits for
// the copy, never the copy for the wire), then waited for in order.
void HandoffSender::send_state() {
  if (image_) {
    auto* base = static_cast<uint8_t*>(image_->data());
    std::vector<hal::Request> pieces;
    for (uint64_t at = 0; at < state_bytes_; at += kPiece) {
      const uint64_t n = std::min(kPiece, state_bytes_ - at);
      {
        std::unique_lock<std::mutex> lk(mu_);
        cv_.wait(lk, [&] { return copied_ >= at + n || closing_; });
        if (copied_ < at + n) return;  // torn down before the copy was whole
      }
      pieces.push_back(
          comm_->post(hal::coll_args(HAL_COLL_BROADCAST, HAL_DTYPE_U8, n, base + at, base + at)));
    }
    for (auto& r : pieces) {
      if (!r.wait(timeout_)) {
        comm_->abort();  // the rest must not be read from memory that goes
        throw Error(Code::timeout, "runtime: a hand-off piece was not taken in time");
      }
    }
    image_.reset();  // the copy goes as soon as it is sent
    std::lock_guard<std::mutex> lk(mu_);
    sent_ += state_bytes_;
    return;
  }
  for (uint64_t at = 0; at < host_image_.size(); at += kPiece) {
    const uint64_t n = std::min<uint64_t>(kPiece, host_image_.size() - at);
    broadcast(staging_, *comm_, host_image_.data() + at, n, timeout_);
    std::lock_guard<std::mutex> lk(mu_);
    sent_ += n;
  }
  host_image_ = {};
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

void HandoffSender::run() {
  try {
    send_state();
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
    : comm_(std::move(comm)), plugin_(plugin), staging_(std::move(plugin)), timeout_(timeout) {}

void HandoffReceiver::state(const std::vector<checkpoint::TensorView>& views) {
  const uint64_t total = total_bytes(views);
  if (plugin_->host_addressable(0)) {
    hal::Buffer image(plugin_, 0, std::max<uint64_t>(total, 1));
    auto* base = static_cast<uint8_t*>(image.data());
    checkpoint::shard::offer_huge_pages(base, total);
    broadcast_pieces(*comm_, base, total, timeout_,
                     [&](uint64_t at, uint64_t n) { checkpoint::copy_out_piece(base + at, at, n, views); });
    return;
  }
  std::vector<uint8_t> piece(std::min(kPiece, total));
  for (uint64_t at = 0; at < total; at += kPiece) {
    const uint64_t n = std::min<uint64_t>(kPiece, total - at);
    broadcast(staging_, *comm_, piece.data(), n, timeout_);
    checkpoint::copy_out_piece(piece.data(), at, n, views);
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
