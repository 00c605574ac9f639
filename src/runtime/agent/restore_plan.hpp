// Which state a recovery restores, decided from what each rank holds: pure
// (holdings in, a plan out), so the agent, the cluster simulator and the
// tests decide it the same way. Part of the agent's recovery logic.
#pragma once

#include "runtime/restore_tier.hpp"

#include <sigma/replica_placement.hpp>

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace sigma::runtime::recovery {

// What one rank of the next generation's world holds, as it reported.
struct RankHoldings {
  // It survived the fault: its own memory-tier snapshots are still there.
  // A rank being replaced (false) holds nothing in memory; its state comes
  // from a replica a survivor keeps of it (where the placement put it: in
  // another failure domain, or on the ring successor).
  bool survived = false;
  std::set<uint64_t> own;                           // its own memory-tier snapshots (step indices)
  std::map<uint32_t, std::set<uint64_t>> replicas;  // the replicas it keeps, by the rank whose they are
  std::set<uint64_t> disk;                          // its committed disk checkpoints
};

struct RestorePlan {
  RestoreTier tier = RestoreTier::none;
  uint64_t index = 0;
  // memory only: (holder, receiver) of each replaced rank's replica.
  std::vector<std::pair<uint32_t, uint32_t>> handoff;
};

// The newest state every rank can restore:
//  1. memory: an index every survivor holds itself and, for every replaced
//     rank, some other survivor holds as a replica of it (the lowest such
//     rank hands it over);
//  2. disk: the newest checkpoint every rank committed;
//  3. none: when no rank has finished a step yet (`steps_done` == 0: the
//     fault came before the first snapshot was complete), a fresh start is
//     the restore.
// nullopt when none of these exists: the state is lost.
std::optional<RestorePlan> plan_restore(const std::vector<RankHoldings>& ranks, uint64_t steps_done);

// A memory restore of `index`: each survivor's snapshot of it that a
// surviving holder under `placement` (the next generation's) lacks -- a
// fault may have cut the exchange that was bringing it -- as (source,
// holder) pairs, sent before the replaced ranks' states are handed over,
// so that a second fault just after the rejoin still finds those states in
// a peer. Pairs with a replacement are left to the first step's snapshot:
// a replacement that hangs then keeps only its donor from joining, and the
// agent can tell it from the survivors.
std::vector<std::pair<uint32_t, uint32_t>> refresh_moves(const std::vector<RankHoldings>& ranks,
                                                         uint64_t index,
                                                         const checkpoint::ReplicaPlacement& placement);

// What the memory tier offers, in words, for a plan that found nothing:
// the steps every survivor holds itself, and for each replaced rank the
// steps of it the survivors keep and where ("rank 2: steps 40, 41 on rank
// 0"), or that none does.
std::string describe_memory(const std::vector<RankHoldings>& ranks);

}  // namespace sigma::runtime::recovery
