#include "runtime/handoff_stream.hpp"

#include "checkpoint/shard.hpp"
#include "checkpoint/view_copy.hpp"

#include <sigma/error.hpp>

#include <algorithm>
#include <cstring>
#include <utility>

namespace sigma::runtime {

namespace {

// The state travels in pieces of at most this size: the receiver takes
// each while the next ones are in flight.
constexpr uint64_t kPiece = 16ull << 20;
// Views this large travel in pieces of their own.
constexpr uint64_t kOwnPieces = 1ull << 20;

void broadcast(hal::HostStaging& staging, hal::Communicator& comm, void* data, uint64_t bytes,
               std::chrono::nanoseconds timeout) {
  staging.broadcast(comm, data, bytes, HAL_DTYPE_U8, 0, timeout);
}

uint64_t total_bytes(const std::vector<checkpoint::TensorView>& views) {
  uint64_t n = 0;
  for (const auto& v : views) n += v.bytes();
  return n;
}

// [from, to) of the image in pieces of at most kPiece.
void cut_range(uint64_t from, uint64_t to, std::vector<HandoffPiece>& out) {
  for (uint64_t at = from; at < to; at += kPiece) out.push_back({at, std::min(kPiece, to - at), -1, 0});
}

// Each piece posted from (or into) `where(piece)` once `ready(piece)`
// says so, then waited for in order, `arrived(piece)` called for each as it
// is done. False when `ready` refused a piece (nothing posted is waited for
// then: the caller aborts).
template <typename Ready, typename Where, typename Arrived>
bool broadcast_pieces(hal::Communicator& comm, const std::vector<HandoffPiece>& pieces,
                      std::chrono::nanoseconds timeout, Ready&& ready, Where&& where, Arrived&& arrived) {
  std::vector<hal::Request> posted;
  posted.reserve(pieces.size());
  for (const auto& p : pieces) {
    if (!ready(p)) return false;
    uint8_t* at = where(p);
    posted.push_back(comm.post(hal::coll_args(HAL_COLL_BROADCAST, HAL_DTYPE_U8, p.bytes, at, at)));
  }
  for (size_t i = 0; i < posted.size(); ++i) {
    if (!posted[i].wait(timeout)) {
      comm.abort();  // the rest must not touch memory that goes
      throw Error(Code::timeout, "runtime: a hand-off piece did not arrive in time");
    }
    arrived(pieces[i]);
  }
  return true;
}

// Whether the receiver may land bytes in view `v` itself: host memory.
bool lands_in_place(const checkpoint::TensorView& v) {
  return v.plugin == nullptr || v.plugin->host_addressable(v.device);
}

}  // namespace

std::vector<HandoffPiece> handoff_pieces(const std::vector<checkpoint::TensorView>& views) {
  std::vector<HandoffPiece> out;
  uint64_t at = 0, run = 0;  // run: where the current run of small views began
  for (size_t i = 0; i < views.size(); ++i) {
    const uint64_t n = views[i].bytes();
    if (n < kOwnPieces) {
      at += n;
      if (at - run >= kPiece) {
        cut_range(run, at, out);
        run = at;
      }
      continue;
    }
    cut_range(run, at, out);
    for (uint64_t off = 0; off < n; off += kPiece)
      out.push_back({at + off, std::min(kPiece, n - off), static_cast<int64_t>(i), off});
    run = at += n;
  }
  cut_range(run, at, out);
  return out;
}

HandoffSender::HandoffSender(std::shared_ptr<hal::Communicator> comm, hal::PluginPtr plugin,
                             const std::vector<checkpoint::TensorView>& views,
                             std::chrono::nanoseconds timeout)
    : comm_(std::move(comm)),
      plugin_(plugin),
      staging_(std::move(plugin)),
      timeout_(timeout),
      pieces_(handoff_pieces(views)),
      state_bytes_(total_bytes(views)) {
  const uint64_t bytes = state_bytes_;
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
  for (const auto& p : pieces_) {
    checkpoint::copy_in_piece(base + p.at, p.at, p.bytes, views);
    {
      std::lock_guard<std::mutex> lk(mu_);
      copied_ = p.at + p.bytes;
    }
    cv_.notify_all();
  }
}

HandoffSender::HandoffSender(std::shared_ptr<hal::Communicator> comm, hal::PluginPtr plugin,
                             std::shared_ptr<const hal::Buffer> image,
                             const std::vector<checkpoint::TensorView>& views,
                             std::chrono::nanoseconds timeout)
    : comm_(std::move(comm)),
      plugin_(plugin),
      staging_(std::move(plugin)),
      timeout_(timeout),
      pieces_(handoff_pieces(views)),
      state_bytes_(total_bytes(views)),
      copied_(state_bytes_),
      image_(std::move(image)) {
  if (!image_ || image_->size() < state_bytes_ || !plugin_->host_addressable(0))
    throw Error(Code::invalid_argument, "runtime: a hand-off image must hold the state's " +
                                            std::to_string(state_bytes_) +
                                            " bytes in host-addressable memory");
  thread_ = std::thread([this] { run(); });
}

// The state's pieces, each posted once it is copied (the thread waits for
// the copy, never the copy for the wire), then waited for in order.
void HandoffSender::send_state() {
  if (image_) {
    auto* base = static_cast<uint8_t*>(image_->data());
    auto copied = [&](const HandoffPiece& p) {
      std::unique_lock<std::mutex> lk(mu_);
      cv_.wait(lk, [&] { return copied_ >= p.at + p.bytes || closing_; });
      return copied_ >= p.at + p.bytes;
    };
    // Posted as each is copied: false ends the stream, torn down before the
    // copy was whole.
    const bool whole = broadcast_pieces(
        *comm_, pieces_, timeout_, copied, [&](const HandoffPiece& p) { return base + p.at; },
        [](const HandoffPiece&) {});
    if (!whole) return;
    image_.reset();  // the copy goes as soon as it is sent
    std::lock_guard<std::mutex> lk(mu_);
    sent_ += state_bytes_;
    return;
  }
  for (const auto& p : pieces_) {
    broadcast(staging_, *comm_, host_image_.data() + p.at, p.bytes, timeout_);
    std::lock_guard<std::mutex> lk(mu_);
    sent_ += p.bytes;
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
  const auto pieces = handoff_pieces(views);
  if (!plugin_->host_addressable(0)) {
    std::vector<uint8_t> piece(std::min(kPiece, total_bytes(views)));
    for (const auto& p : pieces) {
      broadcast(staging_, *comm_, piece.data(), p.bytes, timeout_);
      checkpoint::copy_out_piece(piece.data(), p.at, p.bytes, views);
    }
    return;
  }
  // Pieces of a view in host memory land in it; the rest in the scratch.
  auto in_place = [&](const HandoffPiece& p) { return p.view >= 0 && lands_in_place(views[p.view]); };
  std::vector<uint64_t> scratch_at(pieces.size());
  uint64_t scratch_bytes = 0;
  for (size_t i = 0; i < pieces.size(); ++i)
    if (!in_place(pieces[i])) scratch_at[i] = std::exchange(scratch_bytes, scratch_bytes + pieces[i].bytes);
  hal::Buffer scratch(plugin_, 0, std::max<uint64_t>(scratch_bytes, 1));
  auto* base = static_cast<uint8_t*>(scratch.data());
  auto where = [&](const HandoffPiece& p) {
    if (in_place(p)) return static_cast<uint8_t*>(views[p.view].data) + p.offset;
    return base + scratch_at[&p - pieces.data()];
  };
  auto always = [](const HandoffPiece&) { return true; };
  broadcast_pieces(*comm_, pieces, timeout_, always, where, [&](const HandoffPiece& p) {
    if (!in_place(p)) checkpoint::copy_out_piece(base + scratch_at[&p - pieces.data()], p.at, p.bytes, views);
  });
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
