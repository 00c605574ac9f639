// The vote over a world of data-parallel replicas' fingerprints: which
// ranks hold parameters their peers do not (vote_replicas in guardrails.hpp).
#include <sigma/guardrails.hpp>

#include "vote.hpp"

#include <map>
#include <set>
#include <string>

namespace sigma::guardrails {

namespace detail {

std::optional<uint64_t> strict_majority(const std::vector<uint64_t>& values) {
  std::map<uint64_t, size_t> votes;
  for (uint64_t v : values) ++votes[v];
  for (const auto& [v, n] : votes)
    if (2 * n > values.size()) return v;
  return std::nullopt;
}

std::optional<uint64_t> agreed_value(const std::vector<uint64_t>& values) {
  if (const auto major = strict_majority(values)) return major;
  std::map<uint64_t, size_t> votes;
  for (uint64_t v : values) ++votes[v];
  size_t best = 0, tied = 0;
  uint64_t value = 0;
  for (const auto& [v, n] : votes) {
    if (n > best) {
      best = n;
      tied = 1;
      value = v;
    } else if (n == best) {
      ++tied;
    }
  }
  if (best < 2 || tied > 1) return std::nullopt;
  return value;
}

}  // namespace detail

namespace {

std::string ranks_text(const std::set<int>& ranks) {
  std::string out;
  for (int r : ranks) out += (out.empty() ? "" : ",") + std::to_string(r);
  return out;
}

// The present ranks `pick` takes, and one print of each.
template <typename Pick>
std::pair<std::vector<int>, std::vector<uint64_t>> present(const std::vector<RankPrints>& prints, Pick pick,
                                                           uint64_t RankPrints::*print) {
  std::vector<int> ranks;
  std::vector<uint64_t> values;
  for (size_t r = 0; r < prints.size(); ++r)
    if (prints[r].present && pick(static_cast<uint32_t>(r))) {
      ranks.push_back(static_cast<int>(r));
      values.push_back(prints[r].*print);
    }
  return {ranks, values};
}

}  // namespace

FingerprintResult vote_replicas(uint64_t step, uint32_t size, const std::vector<RankPrints>& prints) {
  if (size == 0 || prints.size() % size != 0)
    throw Error(Code::invalid_argument, "guardrails: vote_replicas: " + std::to_string(prints.size()) +
                                            " ranks are not replicas of " + std::to_string(size));
  FingerprintResult r;
  r.step = step;
  for (const RankPrints& p : prints) r.fingerprints.push_back(p.present ? p.whole : 0);
  std::set<int> odd, unsettled;
  // What every rank holds alike: what the present ranks agree on.
  const auto [all, shared] = present(
      prints, [](uint32_t) { return true; }, &RankPrints::shared);
  const auto shared_major = detail::agreed_value(shared);
  bool match = true;
  for (size_t i = 0; i < shared.size(); ++i) {
    if (shared[i] != shared.front()) match = false;
    if (shared_major && shared[i] != *shared_major) odd.insert(all[i]);
  }
  // What counterparts hold alike: what each position's ranks agree on;
  // without one, a disagreement goes to the ranks already odd, if the others agree.
  for (uint32_t q = 0; q < size; ++q) {
    const auto [ranks, whole] = present(
        prints, [&](uint32_t rank) { return rank % size == q; }, &RankPrints::whole);
    std::set<uint64_t> distinct(whole.begin(), whole.end());
    if (distinct.size() <= 1) continue;
    match = false;
    if (const auto major = detail::agreed_value(whole)) {
      for (size_t i = 0; i < whole.size(); ++i)
        if (whole[i] != *major) odd.insert(ranks[i]);
      continue;
    }
    std::set<uint64_t> rest;
    for (size_t i = 0; i < whole.size(); ++i)
      if (odd.count(ranks[i]) == 0) rest.insert(whole[i]);
    if (rest.size() != 1)
      for (int rank : ranks) unsettled.insert(rank);
  }
  r.match = match;
  r.odd_ranks.assign(odd.begin(), odd.end());
  if (match) {
    r.reason = "all " + std::to_string(all.size()) + " ranks of the live replicas agree";
    return r;
  }
  r.rerun_needed = !unsettled.empty() || odd.empty();
  r.reason = "replicas disagree";
  if (!odd.empty()) r.reason += ": rank(s) " + ranks_text(odd) + " differ from what the others agree on";
  if (!unsettled.empty())
    r.reason += (odd.empty() ? ": " : "; ") + std::string("no majority among the counterparts ") +
                ranks_text(unsettled) + "; re-run the step on another device to attribute it";
  return r;
}

}  // namespace sigma::guardrails
