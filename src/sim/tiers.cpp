#include "tiers.hpp"

#include "runtime/agent/restore_plan.hpp"

#include <map>
#include <set>

namespace sigma::sim::detail {

TierChoice choose_restore(const checkpoint::ReplicaPlacement& placement, const std::vector<uint32_t>& failed,
                          bool everyone, const std::vector<uint64_t>& snapshots,
                          const std::vector<uint64_t>& disk, uint64_t steps_done) {
  using runtime::recovery::RankHoldings;
  const uint32_t world = placement.world();
  const std::set<uint64_t> held(snapshots.begin(), snapshots.end()), committed(disk.begin(), disk.end());
  std::vector<RankHoldings> ranks;
  if (everyone || failed.size() >= world) {
    ranks.push_back({false, {}, {}, committed});
  } else {
    // The failed ranks and their replicas' holders, renumbered in rank
    // order; a surviving holder keeps every snapshot of the ranks it holds for.
    std::map<uint32_t, uint32_t> index;  // rank -> its place in the reduced world
    for (uint32_t r : failed) {
      index[r] = 0;
      for (uint32_t j = 0; j < placement.replicas(); ++j) index[placement.holder(r, j)] = 0;
    }
    const std::set<uint32_t> gone(failed.begin(), failed.end());
    for (auto& [r, i] : index) {
      i = static_cast<uint32_t>(ranks.size());
      ranks.push_back({!gone.count(r), gone.count(r) ? std::set<uint64_t>{} : held, {}, committed});
    }
    for (uint32_t r : failed)
      for (uint32_t j = 0; j < placement.replicas(); ++j) {
        RankHoldings& h = ranks[index[placement.holder(r, j)]];
        if (h.survived) h.replicas[index[r]] = held;
      }
  }
  const auto plan = runtime::recovery::plan_restore(ranks, steps_done);
  if (!plan) return {std::nullopt, 0};
  return {plan->tier, plan->index};
}

}  // namespace sigma::sim::detail
