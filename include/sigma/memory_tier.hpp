// sigma/memory_tier.hpp -- the checkpoint engine's memory tier: every
// snapshot of a rank's state is kept in memory, and one or two copies of it
// are held by peers a ReplicaPlacement names (sigma/replica_placement.hpp:
// in another failure domain where the domains allow; by default the next
// rank of the ring), exchanged through the HAL. When a process, or a whole
// node, dies, its state survives in a peer and the replacement gets it at
// memory speed, with no disk in the path. The worker session
// (sigma/runtime.hpp) uses it; a framework with its own launcher can too.
//
//   sigma::checkpoint::MemoryTier tier({.keep = 2});
//   auto where = ReplicaPlacement::across(node_of_rank, 1);
//   tier.snapshot(step + 1, views, comm, rank, where);      // collective
//   ... a rank died; the new generation's communicator is built ...
//   tier.handoff(index, {{holder, dead_rank, receiver}}, views, comm, rank);
//
// Where snapshots live: when the communicator's device memory is
// host-addressable (the `cpu` vendor), in memory allocated through the HAL,
// so the exchange sends from and receives into it with no copy; else in
// host memory, staged through one reused HAL buffer. Views may be host
// memory or a plugin's device memory (copied through the HAL's memcpy).
// Buffers of dropped snapshots are reused: fresh memory costs a page fault
// per page, more than the copy itself.
//
// Thread-safety: one thread (the training loop's). Not copyable.
#pragma once

#include <sigma/checkpoint.hpp>
#include <sigma/export.hpp>
#include <sigma/hal.hpp>
#include <sigma/replica_placement.hpp>

#include <cstdint>
#include <map>
#include <memory>
#include <utility>
#include <vector>

namespace sigma::checkpoint {

struct MemoryTierPolicy {
  // Snapshots kept of each peer's state this rank holds a replica of, and
  // of its own: the same number and the newest, whose replicas are only
  // known to have arrived at the next snapshot (so that a fault cutting
  // that exchange still finds the step before in every survivor's memory
  // and its holders'). Older ones are dropped and their memory reused.
  // Each costs the state's size in memory (footprint()).
  size_t keep = 2;
};

// One snapshot moved in a hand-off: `holder` sends its replica of
// `source`'s snapshot (its own snapshot when it is the source) to
// `receiver`, which takes it as its own -- or, a refresh, keeps it as its
// replica of the source (a holder that lacked it).
struct ReplicaHandoff {
  uint32_t holder = 0, source = 0, receiver = 0;
  bool refresh = false;
};

class SIGMA_EXPORT MemoryTier {
 public:
  // Throws Error(invalid_argument) for keep == 0.
  explicit MemoryTier(MemoryTierPolicy policy = {});
  ~MemoryTier();
  MemoryTier(const MemoryTier&) = delete;
  MemoryTier& operator=(const MemoryTier&) = delete;

  // The memory one rank's tier holds in steady state for a `bytes` state:
  // `keep` + 1 own snapshots, `keep` of each of `replicas` peers', and the
  // replicas arriving. Pure.
  static uint64_t footprint(uint64_t bytes, size_t keep, uint32_t replicas);

  // Collective over `comm` (every rank, same order, same placement): copies
  // `views` as snapshot `index` (steps done) and sends a copy to each of
  // this rank's holders, receiving the snapshots of the ranks it holds for.
  // World 1: no replica. The copy is taken before it returns (the views may
  // change at once) and is this rank's own snapshot from then on. Where
  // snapshots live in HAL memory, the exchange is only posted: it runs on
  // the communicator while training goes on, and the peers' copies count as
  // replicas once they have arrived (settle(), or the next call that needs
  // them); then replicas of ranks this placement no longer gives this rank
  // are dropped. Operations posted on `comm` after this one queue behind
  // it; `comm` must outlive the exchange (or be aborted, then abandon()).
  // Throws the communicator's errors (a peer gone while the exchange is
  // posted or run); the own copy is kept all the same.
  void snapshot(uint64_t index, const std::vector<TensorView>& views, hal::Communicator& comm, uint32_t rank,
                const ReplicaPlacement& placement);
  // The same on the ring (ReplicaPlacement::ring(world)).
  void snapshot(uint64_t index, const std::vector<TensorView>& views, hal::Communicator& comm, uint32_t rank,
                uint32_t world);

  // Keeps the replica of the exchange in flight if it has arrived; never
  // blocks. An exchange that failed is dropped here (the communicator's
  // next operation reports the failure).
  void settle();
  // Waits for the exchange in flight and keeps its replicas; throws
  // its error (Error(timeout) after 60 s).
  void flush();
  // After the communicator was aborted (a peer failed): the exchange in
  // flight is kept if it had finished and dropped if not. Waits only for
  // the plugin to let go of the buffers.
  void abandon();

  // Indices this rank holds of its own state / as replicas of any peer's,
  // and the replicas by the rank whose state they are (replicas whose
  // exchange is still in flight are not counted).
  std::vector<uint64_t> own_indices() const;
  std::vector<uint64_t> replica_indices() const;
  std::map<uint32_t, std::vector<uint64_t>> replicas_held() const;

  // Own snapshot `index` where it lies in HAL memory (host-addressable),
  // the state's views one after another as snapshot() copied them: a
  // reader that must not copy the state again (contained recovery's donor
  // streams it). The tier never writes into it again; once dropped, its
  // memory goes with the last holder instead of being reused. nullptr when
  // this rank does not hold it or holds it in host memory. Does not wait
  // for the exchange in flight (that only reads it too).
  std::shared_ptr<const hal::Buffer> own_image(uint64_t index);

  // Copies own snapshot `index` into `views` (the sizes must match). False
  // when this rank does not hold it.
  bool restore_own(uint64_t index, const std::vector<TensorView>& views) const;

  // Collective over a new communicator: for each move, the holder sends its
  // replica of the source's snapshot `index` (or its own) and the receiver
  // restores it into `views` and keeps it as its own -- or, a refresh,
  // keeps it as a replica. Moves are processed in the given order by every
  // rank. Throws Error(data_loss) when a holder lacks the snapshot.
  void handoff(uint64_t index, const std::vector<ReplicaHandoff>& moves, const std::vector<TensorView>& views,
               hal::Communicator& comm, uint32_t rank);

  // Every call below, and snapshot and handoff, first waits for the
  // exchange in flight (throwing its error).

  // Forgets snapshots newer than `index` (after a rollback to it: they
  // describe steps that will be run again).
  void drop_after(uint64_t index);
  // Forgets the replicas (the ranks were renumbered).
  void drop_replicas();
  // Forgets everything (a new rank assignment on a new ring).
  void clear();

  // Allocates now, and writes to, the memory that snapshots of a `bytes`
  // state take in steady state (footprint()), counting what is already
  // held. Later
  // snapshots then neither fault pages in (the first touch of fresh memory
  // costs more than the copy) nor run out of memory mid-training: a
  // machine that cannot hold them fails here. Not collective.
  void reserve(uint64_t bytes, hal::Communicator& comm, const ReplicaPlacement& placement);
  // The same on the ring (ReplicaPlacement::ring(world)).
  void reserve(uint64_t bytes, hal::Communicator& comm, uint32_t world);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace sigma::checkpoint
