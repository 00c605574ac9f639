#include <sigma/error.hpp>
#include <sigma/memory_tier.hpp>

#include "checkpoint/view_copy.hpp"

#include <algorithm>
#include <array>
#include <cstring>
#include <functional>
#include <map>
#include <optional>
#include <set>

namespace sigma::checkpoint {

namespace {

constexpr auto kTimeout = std::chrono::seconds(60);

hal_coll_args_t args(hal_coll_op_t op, uint32_t peer, uint64_t count, const void* send, void* recv) {
  return hal::coll_args(op, HAL_DTYPE_U8, count, send, recv, HAL_REDUCE_SUM, peer);
}

bool host_addressable(const hal::PluginPtr& plugin) { return plugin->host_addressable(0); }

// A snapshot travels in pieces of this size (the last one shorter): the
// receiver of a hand-off copies each piece into the training's tensors
// while the next ones arrive.
constexpr uint64_t kPiece = 16ull << 20;

// One snapshot: HAL memory (host-addressable) or host memory. A lent one
// (own_image) is never reused: its memory goes with its last holder.
struct Snap {
  std::shared_ptr<hal::Buffer> dev;
  std::vector<uint8_t> host;
  uint64_t size = 0;
  bool lent = false;
  uint8_t* data() const {
    return dev ? static_cast<uint8_t*>(dev->data()) : const_cast<uint8_t*>(host.data());
  }
};

}  // namespace

// An exchange posted and not yet waited for: the sources' snapshots
// `index` arriving in `theirs`, this rank's going out to its holders.
struct Inflight {
  uint64_t index = 0;
  std::vector<std::pair<uint32_t, Snap>> theirs;  // (source, snapshot), one per replica
  std::vector<hal::Request> requests;             // in posting order
};

struct MemoryTier::Impl {
  size_t keep_;
  std::map<uint64_t, Snap> own_;
  std::map<uint32_t, std::map<uint64_t, Snap>> replicas_;  // source rank -> index -> its snapshot
  std::set<uint32_t> sources_;           // whose replicas the newest placement gives this rank
  std::set<uint32_t> previous_sources_;  // ... and the one before (dropped a snapshot later)
  std::vector<Snap> free_;
  size_t free_cap_ = 2;                 // buffers kept for reuse (more once reserved)
  std::unique_ptr<hal::Buffer> stage_;  // device memory that is not host-addressable
  std::optional<Inflight> inflight_;

  Snap take(hal::Communicator& comm, uint64_t bytes);  // a free buffer of that size, else fresh()
  Snap fresh(hal::Communicator& comm, uint64_t bytes);
  void give_back(Snap s);
  void send(hal::Communicator& comm, uint32_t peer, const Snap& s);
  uint64_t recv_size(hal::Communicator& comm, uint32_t peer);
  Snap recv(hal::Communicator& comm, uint32_t peer, std::optional<uint64_t> expect = std::nullopt,
            const std::function<void(const Snap&, uint64_t, uint64_t)>& arrived = {});
  static void wait_all(std::vector<hal::Request>& requests, const char* what);
  uint64_t swap_sizes(hal::Communicator& comm, uint32_t to, uint32_t from, bool send_first, uint64_t mine);
  void exchange_now(uint64_t index, const Snap& mine, hal::Communicator& comm, uint32_t rank,
                    const ReplicaPlacement& p);
  void post_exchange(uint64_t index, const Snap& mine, hal::Communicator& comm, uint32_t rank,
                     const ReplicaPlacement& p);
  void keep_replica(uint32_t source, uint64_t index, Snap theirs);
  void forget_other_sources();  // replicas of ranks this rank no longer holds for
  void finish();                // waits for the exchange in flight and keeps its replicas; throws its error
  void trim(std::map<uint64_t, Snap>& m, size_t limit);
  void drop_replicas();
};

MemoryTier::MemoryTier(MemoryTierPolicy policy) : impl_(std::make_unique<Impl>()) {
  if (policy.keep == 0) throw Error(Code::invalid_argument, "memory tier: keep must be at least 1");
  impl_->keep_ = policy.keep;
}
MemoryTier::~MemoryTier() = default;

uint64_t MemoryTier::footprint(uint64_t bytes, size_t keep, uint32_t replicas) {
  // Own (one more than keep: the newest's exchange runs behind) and
  // replicas kept, and the replicas arriving.
  return bytes * (keep * (1 + uint64_t{replicas}) + 1 + replicas);
}

Snap MemoryTier::Impl::take(hal::Communicator& comm, uint64_t bytes) {
  for (size_t i = 0; i < free_.size(); ++i) {
    if (free_[i].size != bytes) continue;
    Snap s = std::move(free_[i]);
    free_.erase(free_.begin() + static_cast<std::ptrdiff_t>(i));
    return s;
  }
  return fresh(comm, bytes);
}

Snap MemoryTier::Impl::fresh(hal::Communicator& comm, uint64_t bytes) {
  Snap s;
  s.size = bytes;
  if (host_addressable(comm.plugin()))
    s.dev = std::make_shared<hal::Buffer>(comm.plugin(), 0, std::max<uint64_t>(bytes, 8));
  else
    s.host.resize(bytes);
  return s;
}

void MemoryTier::Impl::give_back(Snap s) {
  if (s.lent) return;  // a holder may still read it
  free_.push_back(std::move(s));
  while (free_.size() > free_cap_) free_.erase(free_.begin());
}

void MemoryTier::Impl::send(hal::Communicator& comm, uint32_t peer, const Snap& s) {
  hal::Buffer header(comm.plugin(), 0, 8);
  header.copy_from_host(&s.size, 8);
  comm.run(args(HAL_COLL_SEND, peer, 8, header.data(), nullptr), kTimeout);
  if (s.size == 0) return;
  const uint8_t* from = s.data();
  if (!s.dev) {
    if (!stage_ || stage_->size() < s.size) stage_ = std::make_unique<hal::Buffer>(comm.plugin(), 0, s.size);
    stage_->copy_from_host(s.data(), s.size);
    from = static_cast<const uint8_t*>(stage_->data());
  }
  std::vector<hal::Request> pieces;
  for (uint64_t at = 0; at < s.size; at += kPiece)
    pieces.push_back(comm.post(args(HAL_COLL_SEND, peer, std::min(kPiece, s.size - at), from + at, nullptr)));
  wait_all(pieces, "sending a snapshot");
}

uint64_t MemoryTier::Impl::recv_size(hal::Communicator& comm, uint32_t peer) {
  uint64_t n = 0;
  hal::Buffer header(comm.plugin(), 0, 8);
  comm.run(args(HAL_COLL_RECV, peer, 8, nullptr, header.data()), kTimeout);
  header.copy_to_host(&n, 8);
  if (n > (uint64_t{1} << 40))
    throw Error(Code::data_loss, "memory tier: a peer announced " + std::to_string(n) + " bytes");
  return n;
}

// Every piece is posted at once, then waited for in order; `arrived` runs
// on each piece (offset, length) once it is there, while the later ones
// are still arriving. `expect`: the size the caller's state has (another
// is refused before anything is received).
Snap MemoryTier::Impl::recv(hal::Communicator& comm, uint32_t peer, std::optional<uint64_t> expect,
                            const std::function<void(const Snap&, uint64_t, uint64_t)>& arrived) {
  const uint64_t n = recv_size(comm, peer);
  if (expect && n != *expect)
    throw Error(Code::invalid_argument, "memory tier: the snapshot holds " + std::to_string(n) +
                                            " bytes, the state's views " + std::to_string(*expect));
  Snap s = take(comm, n);
  if (n == 0) return s;
  if (!s.dev && (!stage_ || stage_->size() < n)) stage_ = std::make_unique<hal::Buffer>(comm.plugin(), 0, n);
  auto* into = s.dev ? s.data() : static_cast<uint8_t*>(stage_->data());
  std::vector<hal::Request> pieces;
  for (uint64_t at = 0; at < n; at += kPiece)
    pieces.push_back(comm.post(args(HAL_COLL_RECV, peer, std::min(kPiece, n - at), nullptr, into + at)));
  for (size_t k = 0; k < pieces.size(); ++k) {
    if (!pieces[k].wait(kTimeout))
      throw Error(Code::timeout, "memory tier: receiving a snapshot did not finish within " +
                                     std::to_string(kTimeout.count()) + " s");
    const uint64_t at = k * kPiece, len = std::min(kPiece, n - at);
    if (!s.dev) stage_->copy_to_host(s.host.data() + at, len, at);
    if (arrived) arrived(s, at, len);
  }
  return s;
}

void MemoryTier::Impl::wait_all(std::vector<hal::Request>& requests, const char* what) {
  for (auto& r : requests)
    if (!r.wait(kTimeout))
      throw Error(Code::timeout, std::string("memory tier: ") + what + " did not finish within " +
                                     std::to_string(kTimeout.count()) + " s");
}

void MemoryTier::reserve(uint64_t bytes, hal::Communicator& comm, uint32_t world) {
  reserve(bytes, comm, ReplicaPlacement::ring(world));
}

void MemoryTier::reserve(uint64_t bytes, hal::Communicator& comm, const ReplicaPlacement& placement) {
  auto& m = *impl_;
  m.finish();
  const size_t want = static_cast<size_t>(footprint(1, m.keep_, placement.replicas()));
  size_t held = 0;
  for (const auto& [k, s] : m.own_) held += s.size == bytes;
  for (const auto& [source, held_of] : m.replicas_)
    for (const auto& [k, s] : held_of) held += s.size == bytes;
  for (const auto& s : m.free_) held += s.size == bytes;
  m.free_cap_ = std::max<size_t>(2, want);
  for (; held < want; ++held) {
    Snap s = m.fresh(comm, bytes);
    std::memset(s.data(), 0, s.size);  // the pages are faulted in here
    m.free_.push_back(std::move(s));
  }
}

void MemoryTier::drop_replicas() {
  impl_->finish();
  impl_->drop_replicas();
}

void MemoryTier::Impl::drop_replicas() {
  for (auto& [source, held] : replicas_)
    for (auto& [k, s] : held) give_back(std::move(s));
  replicas_.clear();
}

void MemoryTier::clear() {
  auto& m = *impl_;
  m.finish();
  m.drop_replicas();
  for (auto& [k, s] : m.own_) m.give_back(std::move(s));
  m.own_.clear();
}

void MemoryTier::Impl::trim(std::map<uint64_t, Snap>& m, size_t limit) {
  while (m.size() > limit) {
    give_back(std::move(m.begin()->second));
    m.erase(m.begin());
  }
}

void MemoryTier::snapshot(uint64_t index, const std::vector<TensorView>& views, hal::Communicator& comm,
                          uint32_t rank, uint32_t world) {
  snapshot(index, views, comm, rank, ReplicaPlacement::ring(world));
}

void MemoryTier::snapshot(uint64_t index, const std::vector<TensorView>& views, hal::Communicator& comm,
                          uint32_t rank, const ReplicaPlacement& placement) {
  auto& m = *impl_;
  m.finish();  // the previous snapshot's exchange, if still in flight
  // Own snapshots: the keep newest whose exchange is done, and this one,
  // whose replicas count only once its exchange is (the next snapshot).
  // A fault that cuts this exchange leaves the holders a step behind the
  // source; the step before is still here for every survivor to restore
  // in common. The oldest's buffer is released first, for the new copy.
  m.trim(m.own_, m.keep_);
  uint64_t total = 0;
  for (const auto& v : views) total += v.bytes();
  Snap mine = m.take(comm, total);
  copy_in(mine.data(), total, views);
  m.previous_sources_ =
      std::move(m.sources_);  // kept one more snapshot: their new holders may not have them yet
  m.sources_.clear();
  for (uint32_t j = 0; j < placement.replicas(); ++j) m.sources_.insert(placement.source(rank, j));
  const auto keep_own = [&] {
    auto old = m.own_.find(index);
    if (old != m.own_.end()) m.give_back(std::move(old->second));
    m.own_[index] = std::move(mine);
    m.trim(m.own_, m.keep_ + 1);
  };
  try {
    if (placement.replicas() > 0 && mine.dev)
      m.post_exchange(index, mine, comm, rank,
                      placement);  // sends from `mine`, which stays in own_ meanwhile
    else if (placement.replicas() > 0)
      m.exchange_now(index, mine, comm, rank, placement);  // host memory, staged through one device buffer
  } catch (const Error&) {
    keep_own();  // whole whatever became of the exchange (a peer gone while posting): kept, then the error
    throw;
  }
  keep_own();
}

// Each replica's exchange in turn; within one, a rank sends first or
// receives first as the placement alternates them along the shift's cycle,
// so the exchange cannot deadlock whatever the transport's send semantics.
void MemoryTier::Impl::exchange_now(uint64_t index, const Snap& mine, hal::Communicator& comm, uint32_t rank,
                                    const ReplicaPlacement& p) {
  for (uint32_t j = 0; j < p.replicas(); ++j) {
    const uint32_t to = p.holder(rank, j), from = p.source(rank, j);
    Snap theirs;
    if (p.sends_first(rank, j)) {
      send(comm, to, mine);
      theirs = recv(comm, from);
    } else {
      theirs = recv(comm, from);
      send(comm, to, mine);
    }
    keep_replica(from, index, std::move(theirs));
  }
  forget_other_sources();
}

// Returns the source's size.
uint64_t MemoryTier::Impl::swap_sizes(hal::Communicator& comm, uint32_t to, uint32_t from, bool send_first,
                                      uint64_t mine) {
  hal::Buffer out(comm.plugin(), 0, 8), in(comm.plugin(), 0, 8);
  out.copy_from_host(&mine, 8);
  const auto send = args(HAL_COLL_SEND, to, 8, out.data(), nullptr);
  const auto recv = args(HAL_COLL_RECV, from, 8, nullptr, in.data());
  comm.run(send_first ? send : recv, kTimeout);
  comm.run(send_first ? recv : send, kTimeout);
  uint64_t n = 0;
  in.copy_to_host(&n, 8);
  if (n > (uint64_t{1} << 40))
    throw Error(Code::data_loss, "memory tier: a peer announced " + std::to_string(n) + " bytes");
  return n;
}

// The sizes now; the snapshots themselves posted in the same order, to move
// while the next steps run.
void MemoryTier::Impl::post_exchange(uint64_t index, const Snap& mine, hal::Communicator& comm, uint32_t rank,
                                     const ReplicaPlacement& p) {
  Inflight f;
  f.index = index;
  for (uint32_t j = 0; j < p.replicas(); ++j) {
    const uint32_t to = p.holder(rank, j), from = p.source(rank, j);
    const bool first = p.sends_first(rank, j);
    Snap theirs = take(comm, swap_sizes(comm, to, from, first, mine.size));
    const auto send = args(HAL_COLL_SEND, to, mine.size, mine.data(), nullptr);
    const auto recv = args(HAL_COLL_RECV, from, theirs.size, nullptr, theirs.data());
    for (const auto* a : first ? std::array{&send, &recv} : std::array{&recv, &send})
      if (a->count > 0) f.requests.push_back(comm.post(*a));
    f.theirs.emplace_back(from, std::move(theirs));
  }
  inflight_ = std::move(f);
}

void MemoryTier::Impl::keep_replica(uint32_t source, uint64_t index, Snap theirs) {
  auto& held = replicas_[source];
  auto old = held.find(index);
  if (old != held.end()) give_back(std::move(old->second));
  held[index] = std::move(theirs);
  trim(held, keep_);
}

void MemoryTier::Impl::forget_other_sources() {
  for (auto it = replicas_.begin(); it != replicas_.end();) {
    if (sources_.count(it->first) || previous_sources_.count(it->first)) {
      ++it;
      continue;
    }
    for (auto& [k, s] : it->second) give_back(std::move(s));
    it = replicas_.erase(it);
  }
}

void MemoryTier::Impl::finish() {
  if (!inflight_) return;
  Inflight f = std::move(*inflight_);
  inflight_.reset();
  for (auto& r : f.requests)
    if (!r.wait(kTimeout))
      throw Error(Code::timeout, "memory tier: the replica exchange of snapshot " + std::to_string(f.index) +
                                     " did not finish within " + std::to_string(kTimeout.count()) + " s");
  for (auto& [source, snap] : f.theirs) keep_replica(source, f.index, std::move(snap));
  forget_other_sources();
}

void MemoryTier::flush() { impl_->finish(); }

void MemoryTier::settle() {
  auto& m = *impl_;
  if (!m.inflight_) return;
  try {
    bool done = true;
    for (auto& r : m.inflight_->requests) done = done && r.test();
    if (done) m.finish();
  } catch (const Error&) {
    m.inflight_.reset();  // failed: the replica never came; the communicator reports the failure
  }
}

void MemoryTier::abandon() {
  auto& m = *impl_;
  if (!m.inflight_) return;
  try {
    m.finish();  // after an abort: at once, kept if it had finished
  } catch (const Error&) {
    m.inflight_.reset();
  }
}

std::shared_ptr<const hal::Buffer> MemoryTier::own_image(uint64_t index) {
  auto it = impl_->own_.find(index);
  if (it == impl_->own_.end() || !it->second.dev) return nullptr;
  it->second.lent = true;
  return it->second.dev;
}

std::vector<uint64_t> MemoryTier::own_indices() const {
  auto& m = *impl_;
  std::vector<uint64_t> out;
  for (auto& [k, v] : m.own_) out.push_back(k);
  return out;
}

std::vector<uint64_t> MemoryTier::replica_indices() const {
  std::set<uint64_t> all;
  for (const auto& [source, held] : impl_->replicas_)
    for (const auto& [k, v] : held) all.insert(k);
  return {all.begin(), all.end()};
}

std::map<uint32_t, std::vector<uint64_t>> MemoryTier::replicas_held() const {
  std::map<uint32_t, std::vector<uint64_t>> out;
  for (const auto& [source, held] : impl_->replicas_)
    for (const auto& [k, v] : held) out[source].push_back(k);
  return out;
}

bool MemoryTier::restore_own(uint64_t index, const std::vector<TensorView>& views) const {
  auto& m = *impl_;
  auto it = m.own_.find(index);
  if (it == m.own_.end()) return false;
  copy_out(it->second.data(), it->second.size, views);
  return true;
}

void MemoryTier::handoff(uint64_t index, const std::vector<ReplicaHandoff>& moves,
                         const std::vector<TensorView>& views, hal::Communicator& comm, uint32_t rank) {
  auto& m = *impl_;
  m.finish();
  uint64_t state = 0;
  for (const auto& v : views) state += v.bytes();
  for (const ReplicaHandoff& h : moves) {
    if (rank == h.holder) {
      const bool own = h.holder == h.source;  // a refresh: its own snapshot
      const std::map<uint64_t, Snap>* from = &m.own_;
      if (!own) {
        auto held = m.replicas_.find(h.source);
        from = held == m.replicas_.end() ? nullptr : &held->second;
      }
      const Snap* snap = nullptr;
      if (from != nullptr)
        if (auto it = from->find(index); it != from->end()) snap = &it->second;
      if (snap == nullptr) {
        throw Error(Code::data_loss,
                    "memory tier: rank " + std::to_string(rank) + " holds no " +
                        (own ? std::string() : "replica of rank " + std::to_string(h.source) + "'s ") +
                        "snapshot " + std::to_string(index));
      }
      m.send(comm, h.receiver, *snap);
    } else if (rank == h.receiver && h.refresh) {
      m.keep_replica(h.source, index, m.recv(comm, h.holder, state));  // a refresh: kept, not restored
    } else if (rank == h.receiver) {
      Snap s = m.recv(comm, h.holder, state, [&](const Snap& part, uint64_t at, uint64_t len) {
        copy_out_range(part.data(), at, len, views);  // while the next pieces arrive
      });
      for (auto& [k, x] : m.own_) m.give_back(std::move(x));
      m.own_.clear();
      m.own_[index] = std::move(s);
    }
  }
}

void MemoryTier::drop_after(uint64_t index) {
  auto& m = *impl_;
  m.finish();
  std::vector<std::map<uint64_t, Snap>*> all{&m.own_};
  for (auto& [source, held] : m.replicas_) all.push_back(&held);
  for (auto* held : all) {
    for (auto it = held->upper_bound(index); it != held->end();) {
      m.give_back(std::move(it->second));
      it = held->erase(it);
    }
  }
}

}  // namespace sigma::checkpoint
