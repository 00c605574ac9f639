// Which state a simulated recovery restores, asked of the agent's own
// restore planner (runtime::recovery::plan_restore) on a reduced world that
// gives the same answer as the whole one: the failed ranks, the ranks the
// placement gives their replicas to (checkpoint::ReplicaPlacement, as the
// runtime computes it) and nothing else, in rank order.
#pragma once

#include "runtime/restore_tier.hpp"

#include <sigma/replica_placement.hpp>

#include <cstdint>
#include <optional>
#include <vector>

namespace sigma::sim::detail {

struct TierChoice {
  std::optional<runtime::RestoreTier> tier;  // nullopt: lost (nothing to restore)
  uint64_t step = 0;
};

// `failed`: ranks whose memory is gone (ascending); `everyone` when every
// process restarts. `placement`: where every rank's replicas are.
// `snapshots`: the steps every survivor holds in memory and as replicas;
// `disk`: committed checkpoints.
TierChoice choose_restore(const checkpoint::ReplicaPlacement& placement, const std::vector<uint32_t>& failed,
                          bool everyone, const std::vector<uint64_t>& snapshots,
                          const std::vector<uint64_t>& disk, uint64_t steps_done);

}  // namespace sigma::sim::detail
