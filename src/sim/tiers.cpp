#include "tiers.hpp"

#include "runtime/agent/restore_plan.hpp"

#include <algorithm>
#include <set>

namespace sigma::sim::detail {

TierChoice choose_restore(uint32_t world, const std::vector<uint32_t>& failed, bool everyone,
                          const std::vector<uint64_t>& snapshots, const std::vector<uint64_t>& disk,
                          uint64_t steps_done) {
  using runtime::recovery::RankHoldings;
  const std::set<uint64_t> held(snapshots.begin(), snapshots.end()), committed(disk.begin(), disk.end());
  std::vector<RankHoldings> ranks;
  if (everyone || failed.size() >= world) {
    ranks.push_back({false, {}, {}, committed});
  } else {
    // The failed ranks and their successors; a survivor holds its own
    // snapshots and the replicas of its predecessor's.
    std::set<uint32_t> keep;
    for (uint32_t r : failed) {
      keep.insert(r);
      keep.insert((r + 1) % world);
    }
    const std::set<uint32_t> gone(failed.begin(), failed.end());
    for (uint32_t r : keep) {
      if (gone.count(r))
        ranks.push_back({false, {}, {}, committed});
      else
        ranks.push_back({true, held, held, committed});
    }
  }
  const auto plan = runtime::recovery::plan_restore(ranks, steps_done);
  if (!plan) return {std::nullopt, 0};
  return {plan->tier, plan->index};
}

}  // namespace sigma::sim::detail
