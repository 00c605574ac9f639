#include "runtime/memory_tier.hpp"

#include <cstring>

namespace sigma::runtime {

namespace {

constexpr auto kTimeout = std::chrono::seconds(60);

hal_coll_args_t args(hal_coll_op_t op, uint32_t peer, uint64_t count, const void* send, void* recv) {
  return hal::coll_args(op, HAL_DTYPE_U8, count, send, recv, HAL_REDUCE_SUM, peer);
}

void send_bytes(hal::Communicator& comm, uint32_t peer, const std::vector<uint8_t>& bytes) {
  hal::Buffer b(comm.plugin(), 0, std::max<uint64_t>(8, bytes.size() + 8));
  const uint64_t n = bytes.size();
  b.copy_from_host(&n, 8);
  if (n) b.copy_from_host(bytes.data(), n, 8);
  comm.run(args(HAL_COLL_SEND, peer, 8, b.data(), nullptr), kTimeout);
  if (n) comm.run(args(HAL_COLL_SEND, peer, n, static_cast<uint8_t*>(b.data()) + 8, nullptr), kTimeout);
}

std::vector<uint8_t> recv_bytes(hal::Communicator& comm, uint32_t peer) {
  uint64_t n = 0;
  {
    hal::Buffer b(comm.plugin(), 0, 8);
    comm.run(args(HAL_COLL_RECV, peer, 8, nullptr, b.data()), kTimeout);
    b.copy_to_host(&n, 8);
  }
  if (n > (uint64_t{1} << 40)) throw Error(Code::data_loss, "memory tier: a peer announced " + std::to_string(n) + " bytes");
  std::vector<uint8_t> out(n);
  if (n) {
    hal::Buffer b(comm.plugin(), 0, n);
    comm.run(args(HAL_COLL_RECV, peer, n, nullptr, b.data()), kTimeout);
    b.copy_to_host(out.data(), n);
  }
  return out;
}

}  // namespace

std::vector<uint8_t> pack(const std::vector<checkpoint::TensorView>& views) {
  uint64_t total = 0;
  for (const auto& v : views) total += v.bytes();
  std::vector<uint8_t> out(total);
  uint64_t off = 0;
  for (const auto& v : views) {
    if (v.bytes()) std::memcpy(out.data() + off, v.data, v.bytes());
    off += v.bytes();
  }
  return out;
}

void unpack(const std::vector<uint8_t>& bytes, const std::vector<checkpoint::TensorView>& views) {
  uint64_t total = 0;
  for (const auto& v : views) total += v.bytes();
  if (total != bytes.size()) {
    throw Error(Code::invalid_argument, "memory tier: the snapshot holds " + std::to_string(bytes.size()) +
                                            " bytes, the state's views " + std::to_string(total));
  }
  uint64_t off = 0;
  for (const auto& v : views) {
    if (v.bytes()) std::memcpy(v.data, bytes.data() + off, v.bytes());
    off += v.bytes();
  }
}

void MemoryTier::trim(std::map<uint64_t, std::vector<uint8_t>>& m) {
  while (m.size() > keep_) m.erase(m.begin());
}

void MemoryTier::snapshot(uint64_t index, const std::vector<checkpoint::TensorView>& views,
                          hal::Communicator& comm, uint32_t rank, uint32_t world) {
  std::vector<uint8_t> mine = pack(views);
  if (world > 1) {
    // Even ranks send first, odd ranks receive first: the ring cannot
    // deadlock whatever the transport's send semantics (rank 0's send to an
    // odd rank 1 always completes first and unblocks the chain).
    const uint32_t next = (rank + 1) % world, prev = (rank + world - 1) % world;
    std::vector<uint8_t> theirs;
    if (rank % 2 == 0) {
      send_bytes(comm, next, mine);
      theirs = recv_bytes(comm, prev);
    } else {
      theirs = recv_bytes(comm, prev);
      send_bytes(comm, next, mine);
    }
    replica_[index] = std::move(theirs);
    trim(replica_);
  }
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
  unpack(it->second, views);
  return true;
}

void MemoryTier::handoff(uint64_t index, const std::vector<std::pair<uint32_t, uint32_t>>& pairs,
                         const std::vector<checkpoint::TensorView>& views, hal::Communicator& comm,
                         uint32_t rank) {
  for (auto [holder, receiver] : pairs) {
    if (rank == holder) {
      auto it = replica_.find(index);
      if (it == replica_.end()) {
        throw Error(Code::data_loss, "memory tier: rank " + std::to_string(rank) + " holds no replica of snapshot " +
                                         std::to_string(index));
      }
      send_bytes(comm, receiver, it->second);
    } else if (rank == receiver) {
      std::vector<uint8_t> bytes = recv_bytes(comm, holder);
      unpack(bytes, views);
      own_.clear();
      own_[index] = std::move(bytes);
    }
  }
}

void MemoryTier::drop_after(uint64_t index) {
  own_.erase(own_.upper_bound(index), own_.end());
  replica_.erase(replica_.upper_bound(index), replica_.end());
}

}  // namespace sigma::runtime
