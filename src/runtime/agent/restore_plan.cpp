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

std::string steps(const std::set<uint64_t>& s) {
  if (s.empty()) return "none";
  std::string out;
  for (uint64_t k : s) out += (out.empty() ? "" : ", ") + std::to_string(k);
  return out;
}

}  // namespace

std::vector<std::pair<uint32_t, uint32_t>> refresh_moves(const std::vector<RankHoldings>& ranks,
                                                         uint64_t index,
                                                         const checkpoint::ReplicaPlacement& placement) {
  std::vector<std::pair<uint32_t, uint32_t>> out;
  for (uint32_t s = 0; s < ranks.size(); ++s) {
    if (!ranks[s].survived) continue;
    for (uint32_t j = 0; j < placement.replicas(); ++j) {
      const uint32_t h = placement.holder(s, j);
      if (h == s || h >= ranks.size() || !ranks[h].survived) continue;
      const auto it = ranks[h].replicas.find(s);
      if (it == ranks[h].replicas.end() || it->second.count(index) == 0) out.emplace_back(s, h);
    }
  }
  return out;
}

std::string describe_memory(const std::vector<RankHoldings>& ranks) {
  std::optional<std::set<uint64_t>> own;
  for (const RankHoldings& h : ranks)
    if (h.survived) own = own ? common(*own, h.own) : h.own;
  std::string out =
      "the survivors' own snapshots in common: steps " + steps(own.value_or(std::set<uint64_t>{}));
  for (uint32_t r = 0; r < ranks.size(); ++r) {
    if (ranks[r].survived) continue;
    std::string kept;
    for (uint32_t h = 0; h < ranks.size(); ++h) {
      auto it = ranks[h].replicas.find(r);
      if (h == r || !ranks[h].survived || it == ranks[h].replicas.end() || it->second.empty()) continue;
      kept += (kept.empty() ? "" : "; ") + std::string("steps ") + steps(it->second) + " on rank " +
              std::to_string(h);
    }
    out += "; rank " + std::to_string(r) +
           " replaced: " + (kept.empty() ? "no survivor keeps a replica of it" : kept);
  }
  return out;
}

std::optional<RestorePlan> plan_restore(const std::vector<RankHoldings>& ranks, uint64_t steps_done) {
  if (ranks.empty()) return std::nullopt;
  if (auto p = from_memory(ranks)) return p;
  if (auto p = from_disk(ranks)) return p;
  if (steps_done == 0) return RestorePlan{RestoreTier::none, 0, {}};
  return std::nullopt;
}

}  // namespace sigma::runtime::recovery
