#include "restore_plan.hpp"

#include <algorithm>
#include <iterator>

namespace sigma::runtime::recovery {
namespace {

std::set<uint64_t> common(const std::set<uint64_t>& a, const std::set<uint64_t>& b) {
  std::set<uint64_t> out;
  std::set_intersection(a.begin(), a.end(), b.begin(), b.end(), std::inserter(out, out.end()));
  return out;
}

std::optional<RestorePlan> from_memory(const std::vector<RankHoldings>& ranks) {
  const uint32_t world = static_cast<uint32_t>(ranks.size());
  std::optional<std::set<uint64_t>> candidates;  // unset until a survivor is seen
  RestorePlan plan{RestoreTier::memory, 0, {}};
  for (uint32_t r = 0; r < world; ++r) {
    if (!ranks[r].survived) continue;
    candidates = candidates ? common(*candidates, ranks[r].own) : ranks[r].own;
  }
  if (!candidates) return std::nullopt;  // no survivor holds anything
  std::vector<uint32_t> replaced;
  for (uint32_t r = 0; r < world; ++r) {
    if (ranks[r].survived) continue;
    replaced.push_back(r);
    std::set<uint64_t> anywhere;  // the steps of r some survivor keeps
    for (const RankHoldings& h : ranks) {
      auto it = h.replicas.find(r);
      if (h.survived && it != h.replicas.end()) anywhere.insert(it->second.begin(), it->second.end());
    }
    candidates = common(*candidates, anywhere);
  }
  if (candidates->empty()) return std::nullopt;
  plan.index = *candidates->rbegin();
  for (uint32_t r : replaced) {
    for (uint32_t h = 0; h < world; ++h) {
      auto it = ranks[h].replicas.find(r);
      if (h == r || !ranks[h].survived || it == ranks[h].replicas.end() || !it->second.count(plan.index))
        continue;
      plan.handoff.emplace_back(h, r);
      break;
    }
  }
  return plan;
}

std::optional<RestorePlan> from_disk(const std::vector<RankHoldings>& ranks) {
  std::set<uint64_t> all = ranks.front().disk;
  for (const RankHoldings& r : ranks) all = common(all, r.disk);
  if (all.empty()) return std::nullopt;
  return RestorePlan{RestoreTier::disk, *all.rbegin(), {}};
}

}  // namespace

std::optional<RestorePlan> plan_restore(const std::vector<RankHoldings>& ranks, uint64_t steps_done) {
  if (ranks.empty()) return std::nullopt;
  if (auto p = from_memory(ranks)) return p;
  if (auto p = from_disk(ranks)) return p;
  if (steps_done == 0) return RestorePlan{RestoreTier::none, 0, {}};
  return std::nullopt;
}

}  // namespace sigma::runtime::recovery
