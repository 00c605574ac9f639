#include "runtime/memory_tier.hpp"

#include <cstring>

namespace sigma::runtime {

namespace {

constexpr auto kTimeout = std::chrono::seconds(60);

hal_coll_args_t args(hal_coll_op_t op, uint32_t peer, uint64_t count, const void* send, void* recv) {
  return hal::coll_args(op, HAL_DTYPE_U8, count, send, recv, HAL_REDUCE_SUM, peer);
}

bool host_addressable(const hal::PluginPtr& plugin) { return plugin->host_addressable(0); }

void check_size(uint64_t size, const std::vector<checkpoint::TensorView>& views) {
  uint64_t total = 0;
  for (const auto& v : views) total += v.bytes();
  if (total != size)
    throw Error(Code::invalid_argument, "memory tier: the snapshot holds " + std::to_string(size) +
                                            " bytes, the state's views " + std::to_string(total));
}

void copy_in(uint8_t* dst, uint64_t size, const std::vector<checkpoint::TensorView>& views) {
  check_size(size, views);
  for (const auto& v : views) {
    if (v.bytes()) std::memcpy(dst, v.data, v.bytes());
    dst += v.bytes();
  }
}

void copy_out(const uint8_t* src, uint64_t size, const std::vector<checkpoint::TensorView>& views) {
  check_size(size, views);
  for (const auto& v : views) {
    if (v.bytes()) std::memcpy(v.data, src, v.bytes());
    src += v.bytes();
  }
}

}  // namespace

// One snapshot: HAL memory (host-addressable) or host memory.
struct MemoryTier::Snap {
  std::unique_ptr<hal::Buffer> dev;
  std::vector<uint8_t> host;
  uint64_t size = 0;
  uint8_t* data() const {
    return dev ? static_cast<uint8_t*>(dev->data()) : const_cast<uint8_t*>(host.data());
  }
};

MemoryTier::MemoryTier(size_t keep) : keep_(keep) {}
MemoryTier::~MemoryTier() = default;

MemoryTier::Snap MemoryTier::take(hal::Communicator& comm, uint64_t bytes) {
  for (size_t i = 0; i < free_.size(); ++i) {
    if (free_[i].size != bytes) continue;
    Snap s = std::move(free_[i]);
    free_.erase(free_.begin() + static_cast<std::ptrdiff_t>(i));
    return s;
  }
  Snap s;
  s.size = bytes;
  if (host_addressable(comm.plugin()))
    s.dev = std::make_unique<hal::Buffer>(comm.plugin(), 0, std::max<uint64_t>(bytes, 8));
  else
    s.host.resize(bytes);
  return s;
}

void MemoryTier::give_back(Snap s) {
  free_.push_back(std::move(s));
  while (free_.size() > 2) free_.erase(free_.begin());
}

void MemoryTier::send(hal::Communicator& comm, uint32_t peer, const Snap& s) {
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

MemoryTier::Snap MemoryTier::recv(hal::Communicator& comm, uint32_t peer) {
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

void MemoryTier::drop_replicas() {
  for (auto& [k, s] : replica_) give_back(std::move(s));
  replica_.clear();
}

void MemoryTier::clear() {
  drop_replicas();
  for (auto& [k, s] : own_) give_back(std::move(s));
  own_.clear();
}

void MemoryTier::trim(std::map<uint64_t, Snap>& m) {
  while (m.size() > keep_) {
    give_back(std::move(m.begin()->second));
    m.erase(m.begin());
  }
}

void MemoryTier::snapshot(uint64_t index, const std::vector<checkpoint::TensorView>& views,
                          hal::Communicator& comm, uint32_t rank, uint32_t world) {
  uint64_t total = 0;
  for (const auto& v : views) total += v.bytes();
  Snap mine = take(comm, total);
  copy_in(mine.data(), total, views);
  if (world > 1) {
    // Even ranks send first, odd ranks receive first: the ring cannot
    // deadlock whatever the transport's send semantics (rank 0's send to an
    // odd rank 1 always completes first and unblocks the chain).
    const uint32_t next = (rank + 1) % world, prev = (rank + world - 1) % world;
    Snap theirs;
    if (rank % 2 == 0) {
      send(comm, next, mine);
      theirs = recv(comm, prev);
    } else {
      theirs = recv(comm, prev);
      send(comm, next, mine);
    }
    auto old = replica_.find(index);
    if (old != replica_.end()) give_back(std::move(old->second));
    replica_[index] = std::move(theirs);
    trim(replica_);
  }
  auto old = own_.find(index);
  if (old != own_.end()) give_back(std::move(old->second));
  own_[index] = std::move(mine);
  trim(own_);
}

std::vector<uint64_t> MemoryTier::own_indices() const {
  std::vector<uint64_t> out;
  for (auto& [k, v] : own_) out.push_back(k);
  return out;
}

std::vector<uint64_t> MemoryTier::replica_indices() const {
  std::vector<uint64_t> out;
  for (auto& [k, v] : replica_) out.push_back(k);
  return out;
}

bool MemoryTier::restore_own(uint64_t index, const std::vector<checkpoint::TensorView>& views) const {
  auto it = own_.find(index);
  if (it == own_.end()) return false;
  copy_out(it->second.data(), it->second.size, views);
  return true;
}

void MemoryTier::handoff(uint64_t index, const std::vector<std::pair<uint32_t, uint32_t>>& pairs,
                         const std::vector<checkpoint::TensorView>& views, hal::Communicator& comm,
                         uint32_t rank) {
  for (auto [holder, receiver] : pairs) {
    if (rank == holder) {
      auto it = replica_.find(index);
      if (it == replica_.end()) {
        throw Error(Code::data_loss, "memory tier: rank " + std::to_string(rank) +
                                         " holds no replica of snapshot " + std::to_string(index));
      }
      send(comm, receiver, it->second);
    } else if (rank == receiver) {
      Snap s = recv(comm, holder);
      copy_out(s.data(), s.size, views);
      for (auto& [k, x] : own_) give_back(std::move(x));
      own_.clear();
      own_[index] = std::move(s);
    }
  }
}

void MemoryTier::drop_after(uint64_t index) {
  for (auto* m : {&own_, &replica_}) {
    for (auto it = m->upper_bound(index); it != m->end();) {
      give_back(std::move(it->second));
      it = m->erase(it);
    }
  }
}

}  // namespace sigma::runtime
