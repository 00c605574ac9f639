#include <sigma/error.hpp>
#include <sigma/memory_tier.hpp>

#include <algorithm>
#include <array>
#include <cstring>
#include <map>
#include <optional>

namespace sigma::checkpoint {

namespace {

constexpr auto kTimeout = std::chrono::seconds(60);

hal_coll_args_t args(hal_coll_op_t op, uint32_t peer, uint64_t count, const void* send, void* recv) {
  return hal::coll_args(op, HAL_DTYPE_U8, count, send, recv, HAL_REDUCE_SUM, peer);
}

bool host_addressable(const hal::PluginPtr& plugin) { return plugin->host_addressable(0); }

void check_size(uint64_t size, const std::vector<TensorView>& views) {
  uint64_t total = 0;
  for (const auto& v : views) total += v.bytes();
  if (total != size)
    throw Error(Code::invalid_argument, "memory tier: the snapshot holds " + std::to_string(size) +
                                            " bytes, the state's views " + std::to_string(total));
}

bool in_device_memory(const TensorView& v) {
  return v.plugin != nullptr && !v.plugin->host_addressable(v.device);
}

void copy_in(uint8_t* dst, uint64_t size, const std::vector<TensorView>& views) {
  check_size(size, views);
  for (const auto& v : views) {
    const uint64_t n = v.bytes();
    if (n > 0 && in_device_memory(v))
      v.plugin->check(
          v.plugin->api().device->memcpy(v.device, dst, v.data, n, HAL_COPY_DEVICE_TO_HOST, nullptr),
          "memcpy (memory tier snapshot)");
    else if (n > 0)
      std::memcpy(dst, v.data, n);
    dst += n;
  }
}

void copy_out(const uint8_t* src, uint64_t size, const std::vector<TensorView>& views) {
  check_size(size, views);
  for (const auto& v : views) {
    const uint64_t n = v.bytes();
    if (n > 0 && in_device_memory(v))
      v.plugin->check(
          v.plugin->api().device->memcpy(v.device, v.data, src, n, HAL_COPY_HOST_TO_DEVICE, nullptr),
          "memcpy (memory tier restore)");
    else if (n > 0)
      std::memcpy(v.data, src, n);
    src += n;
  }
}

// One snapshot: HAL memory (host-addressable) or host memory.
struct Snap {
  std::unique_ptr<hal::Buffer> dev;
  std::vector<uint8_t> host;
  uint64_t size = 0;
  uint8_t* data() const {
    return dev ? static_cast<uint8_t*>(dev->data()) : const_cast<uint8_t*>(host.data());
  }
};

}  // namespace

// A ring exchange posted and not yet waited for: the predecessor's
// snapshot `index` arriving in `theirs`, this rank's going out.
struct Inflight {
  uint64_t index = 0;
  Snap theirs;
  std::vector<hal::Request> requests;  // in posting order
};

struct MemoryTier::Impl {
  size_t keep_;
  std::map<uint64_t, Snap> own_, replica_;
  std::vector<Snap> free_;
  size_t free_cap_ = 2;                 // buffers kept for reuse (more once reserved)
  std::unique_ptr<hal::Buffer> stage_;  // device memory that is not host-addressable
  std::optional<Inflight> inflight_;

  Snap take(hal::Communicator& comm, uint64_t bytes);  // a free buffer of that size, else fresh()
  Snap fresh(hal::Communicator& comm, uint64_t bytes);
  void give_back(Snap s);
  void send(hal::Communicator& comm, uint32_t peer, const Snap& s);
  Snap recv(hal::Communicator& comm, uint32_t peer);
  uint64_t swap_sizes(hal::Communicator& comm, uint32_t rank, uint32_t world, uint64_t mine);
  void post_ring(uint64_t index, const Snap& mine, hal::Communicator& comm, uint32_t rank, uint32_t world);
  void keep_replica(uint64_t index, Snap theirs);
  void finish();  // waits for the exchange in flight and keeps its replica; throws its error
  void trim(std::map<uint64_t, Snap>& m);
  void drop_replicas();
};

MemoryTier::MemoryTier(MemoryTierPolicy policy) : impl_(std::make_unique<Impl>()) {
  if (policy.keep == 0) throw Error(Code::invalid_argument, "memory tier: keep must be at least 1");
  impl_->keep_ = policy.keep;
}
MemoryTier::~MemoryTier() = default;

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
    s.dev = std::make_unique<hal::Buffer>(comm.plugin(), 0, std::max<uint64_t>(bytes, 8));
  else
    s.host.resize(bytes);
  return s;
}

void MemoryTier::Impl::give_back(Snap s) {
  free_.push_back(std::move(s));
  while (free_.size() > free_cap_) free_.erase(free_.begin());
}

void MemoryTier::Impl::send(hal::Communicator& comm, uint32_t peer, const Snap& s) {
  hal::Buffer header(comm.plugin(), 0, 8);
  header.copy_from_host(&s.size, 8);
  comm.run(args(HAL_COLL_SEND, peer, 8, header.data(), nullptr), kTimeout);
  if (s.size == 0) return;
  const void* from = s.data();
  if (!s.dev) {
    if (!stage_ || stage_->size() < s.size) stage_ = std::make_unique<hal::Buffer>(comm.plugin(), 0, s.size);
    stage_->copy_from_host(s.data(), s.size);
    from = stage_->data();
  }
  comm.run(args(HAL_COLL_SEND, peer, s.size, from, nullptr), kTimeout);
}

Snap MemoryTier::Impl::recv(hal::Communicator& comm, uint32_t peer) {
  uint64_t n = 0;
  {
    hal::Buffer header(comm.plugin(), 0, 8);
    comm.run(args(HAL_COLL_RECV, peer, 8, nullptr, header.data()), kTimeout);
    header.copy_to_host(&n, 8);
  }
  if (n > (uint64_t{1} << 40))
    throw Error(Code::data_loss, "memory tier: a peer announced " + std::to_string(n) + " bytes");
  Snap s = take(comm, n);
  if (n == 0) return s;
  if (s.dev) {
    comm.run(args(HAL_COLL_RECV, peer, n, nullptr, s.dev->data()), kTimeout);
  } else {
    if (!stage_ || stage_->size() < n) stage_ = std::make_unique<hal::Buffer>(comm.plugin(), 0, n);
    comm.run(args(HAL_COLL_RECV, peer, n, nullptr, stage_->data()), kTimeout);
    stage_->copy_to_host(s.host.data(), n);
  }
  return s;
}

void MemoryTier::reserve(uint64_t bytes, hal::Communicator& comm, uint32_t world) {
  auto& m = *impl_;
  m.finish();
  const size_t want = m.keep_ + (world > 1 ? m.keep_ : 0) + 2;
  size_t held = 0;
  for (const auto* map : {&m.own_, &m.replica_})
    for (const auto& [k, s] : *map) held += s.size == bytes;
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
  for (auto& [k, s] : replica_) give_back(std::move(s));
  replica_.clear();
}

void MemoryTier::clear() {
  auto& m = *impl_;
  m.finish();
  m.drop_replicas();
  for (auto& [k, s] : m.own_) m.give_back(std::move(s));
  m.own_.clear();
}

void MemoryTier::Impl::trim(std::map<uint64_t, Snap>& m) {
  while (m.size() > keep_) {
    give_back(std::move(m.begin()->second));
    m.erase(m.begin());
  }
}

void MemoryTier::snapshot(uint64_t index, const std::vector<TensorView>& views, hal::Communicator& comm,
                          uint32_t rank, uint32_t world) {
  auto& m = *impl_;
  m.finish();  // the previous snapshot's exchange, if still in flight
  uint64_t total = 0;
  for (const auto& v : views) total += v.bytes();
  Snap mine = m.take(comm, total);
  copy_in(mine.data(), total, views);
  if (world > 1 && mine.dev) {
    m.post_ring(index, mine, comm, rank, world);  // sends from `mine`, which stays in own_ meanwhile
  } else if (world > 1) {
    // Host memory staged through one device buffer: exchanged now.
    const uint32_t next = (rank + 1) % world, prev = (rank + world - 1) % world;
    Snap theirs;
    if (rank % 2 == 0) {
      m.send(comm, next, mine);
      theirs = m.recv(comm, prev);
    } else {
      theirs = m.recv(comm, prev);
      m.send(comm, next, mine);
    }
    m.keep_replica(index, std::move(theirs));
  }
  auto old = m.own_.find(index);
  if (old != m.own_.end()) m.give_back(std::move(old->second));
  m.own_[index] = std::move(mine);
  m.trim(m.own_);
}

// Even ranks send first, odd ranks receive first: the ring cannot deadlock
// whatever the transport's send semantics (rank 0's send to an odd rank 1
// always completes first and unblocks the chain). Returns the
// predecessor's size.
uint64_t MemoryTier::Impl::swap_sizes(hal::Communicator& comm, uint32_t rank, uint32_t world, uint64_t mine) {
  const uint32_t next = (rank + 1) % world, prev = (rank + world - 1) % world;
  hal::Buffer out(comm.plugin(), 0, 8), in(comm.plugin(), 0, 8);
  out.copy_from_host(&mine, 8);
  const auto send = args(HAL_COLL_SEND, next, 8, out.data(), nullptr);
  const auto recv = args(HAL_COLL_RECV, prev, 8, nullptr, in.data());
  comm.run(rank % 2 == 0 ? send : recv, kTimeout);
  comm.run(rank % 2 == 0 ? recv : send, kTimeout);
  uint64_t n = 0;
  in.copy_to_host(&n, 8);
  if (n > (uint64_t{1} << 40))
    throw Error(Code::data_loss, "memory tier: a peer announced " + std::to_string(n) + " bytes");
  return n;
}

// The sizes now; the snapshots themselves posted in the same ring order, to
// move while the next steps run.
void MemoryTier::Impl::post_ring(uint64_t index, const Snap& mine, hal::Communicator& comm, uint32_t rank,
                                 uint32_t world) {
  const uint32_t next = (rank + 1) % world, prev = (rank + world - 1) % world;
  Inflight f;
  f.index = index;
  f.theirs = take(comm, swap_sizes(comm, rank, world, mine.size));
  const auto send = args(HAL_COLL_SEND, next, mine.size, mine.data(), nullptr);
  const auto recv = args(HAL_COLL_RECV, prev, f.theirs.size, nullptr, f.theirs.data());
  for (const auto* a : rank % 2 == 0 ? std::array{&send, &recv} : std::array{&recv, &send})
    if (a->count > 0) f.requests.push_back(comm.post(*a));
  inflight_ = std::move(f);
}

void MemoryTier::Impl::keep_replica(uint64_t index, Snap theirs) {
  auto old = replica_.find(index);
  if (old != replica_.end()) give_back(std::move(old->second));
  replica_[index] = std::move(theirs);
  trim(replica_);
}

void MemoryTier::Impl::finish() {
  if (!inflight_) return;
  Inflight f = std::move(*inflight_);
  inflight_.reset();
  for (auto& r : f.requests)
    if (!r.wait(kTimeout))
      throw Error(Code::timeout, "memory tier: the ring exchange of snapshot " + std::to_string(f.index) +
                                     " did not finish within " + std::to_string(kTimeout.count()) + " s");
  keep_replica(f.index, std::move(f.theirs));
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

std::vector<uint64_t> MemoryTier::own_indices() const {
  auto& m = *impl_;
  std::vector<uint64_t> out;
  for (auto& [k, v] : m.own_) out.push_back(k);
  return out;
}

std::vector<uint64_t> MemoryTier::replica_indices() const {
  auto& m = *impl_;
  std::vector<uint64_t> out;
  for (auto& [k, v] : m.replica_) out.push_back(k);
  return out;
}

bool MemoryTier::restore_own(uint64_t index, const std::vector<TensorView>& views) const {
  auto& m = *impl_;
  auto it = m.own_.find(index);
  if (it == m.own_.end()) return false;
  copy_out(it->second.data(), it->second.size, views);
  return true;
}

void MemoryTier::handoff(uint64_t index, const std::vector<std::pair<uint32_t, uint32_t>>& pairs,
                         const std::vector<TensorView>& views, hal::Communicator& comm, uint32_t rank) {
  auto& m = *impl_;
  m.finish();
  for (auto [holder, receiver] : pairs) {
    if (rank == holder) {
      auto it = m.replica_.find(index);
      if (it == m.replica_.end()) {
        throw Error(Code::data_loss, "memory tier: rank " + std::to_string(rank) +
                                         " holds no replica of snapshot " + std::to_string(index));
      }
      m.send(comm, receiver, it->second);
    } else if (rank == receiver) {
      Snap s = m.recv(comm, holder);
      copy_out(s.data(), s.size, views);
      for (auto& [k, x] : m.own_) m.give_back(std::move(x));
      m.own_.clear();
      m.own_[index] = std::move(s);
    }
  }
}

void MemoryTier::drop_after(uint64_t index) {
  auto& m = *impl_;
  m.finish();
  for (auto* held : {&m.own_, &m.replica_}) {
    for (auto it = held->upper_bound(index); it != held->end();) {
      m.give_back(std::move(it->second));
      it = held->erase(it);
    }
  }
}

}  // namespace sigma::checkpoint
