#include <sigma/error.hpp>
#include <sigma/replica_placement.hpp>

#include <algorithm>
#include <numeric>
#include <utility>

namespace sigma::checkpoint {
namespace {

// Ranks grouped by domain, by rank within one: a counting sort when the
// domain numbers are dense (the simulator places 131,072 ranks per fault).
std::vector<uint32_t> by_domain(const std::vector<uint32_t>& domain) {
  const uint32_t n = static_cast<uint32_t>(domain.size());
  const uint32_t top = n == 0 ? 0 : *std::max_element(domain.begin(), domain.end());
  std::vector<uint32_t> order(n);
  if (top < 4 * static_cast<uint64_t>(n) + 16) {
    std::vector<uint32_t> start(top + 2, 0);
    for (uint32_t d : domain) ++start[d + 1];
    std::partial_sum(start.begin(), start.end(), start.begin());
    for (uint32_t r = 0; r < n; ++r) order[start[domain[r]]++] = r;
    return order;
  }
  std::iota(order.begin(), order.end(), 0u);
  std::stable_sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) { return domain[a] < domain[b]; });
  return order;
}

// The largest domain's size (each domain is one run of the order).
uint32_t largest_block(const std::vector<uint32_t>& order, const std::vector<uint32_t>& domain) {
  uint32_t best = 0, run = 0;
  for (size_t i = 0; i < order.size(); ++i) {
    run = i > 0 && domain[order[i]] == domain[order[i - 1]] ? run + 1 : 1;
    best = std::max(best, run);
  }
  return best;
}

uint64_t inverse_mod(uint64_t a, uint64_t m) {  // a and m coprime, m >= 1
  int64_t t = 0, next = 1;
  int64_t r = static_cast<int64_t>(m), rn = static_cast<int64_t>(a % m);
  while (rn != 0) {
    const int64_t q = r / rn;
    t = std::exchange(next, t - q * next);
    r = std::exchange(rn, r - q * rn);
  }
  return static_cast<uint64_t>(t < 0 ? t + static_cast<int64_t>(m) : t);
}

}  // namespace

ReplicaPlacement ReplicaPlacement::ring(uint32_t world) {
  ReplicaPlacement p;
  p.order_.resize(world);
  std::iota(p.order_.begin(), p.order_.end(), 0u);
  p.position_ = p.order_;
  if (world > 1) p.shifts_ = {1};
  return p;
}

ReplicaPlacement ReplicaPlacement::across(const std::vector<uint32_t>& domain_of_rank, uint32_t replicas) {
  if (replicas < 1 || replicas > 2)
    throw Error(Code::invalid_argument,
                "memory tier: replicas must be 1 or 2, not " + std::to_string(replicas));
  const uint32_t n = static_cast<uint32_t>(domain_of_rank.size());
  ReplicaPlacement p;
  p.order_ = by_domain(domain_of_rank);
  p.position_.resize(n);
  for (uint32_t i = 0; i < n; ++i) p.position_[p.order_[i]] = i;
  const uint32_t m = largest_block(p.order_, domain_of_rank);
  if (n < 2) return p;
  if (2 * static_cast<uint64_t>(m) > n) {
    // One domain holds more than half: no shift crosses for every rank. The
    // ring along the domains' order still crosses at each boundary (one
    // domain: the ring of ranks, r's replica on r + 1).
    p.shifts_ = {1};
    if (replicas == 2 && n > 2) p.shifts_.push_back(2);
    return p;
  }
  p.shifts_ = {m};
  p.crossing_ = 1;
  if (replicas == 2) {
    if (3 * static_cast<uint64_t>(m) <= n) {
      p.shifts_.push_back(2 * m);
      ++p.crossing_;
    } else if (m + 1 <= n - m) {
      p.shifts_.push_back(m + 1);
      ++p.crossing_;
    } else if (n > 2) {
      p.shifts_.push_back(1);  // within the owner's domain (m >= 2 here): only the first crosses
    }
  }
  return p;
}

uint32_t ReplicaPlacement::holder(uint32_t rank, uint32_t j) const {
  const uint64_t n = order_.size();
  return order_[(position_.at(rank) + shifts_.at(j)) % n];
}

uint32_t ReplicaPlacement::source(uint32_t rank, uint32_t j) const {
  const uint64_t n = order_.size();
  return order_[(position_.at(rank) + n - shifts_.at(j)) % n];
}

bool ReplicaPlacement::sends_first(uint32_t rank, uint32_t j) const {
  // Position i lies on the cycle c, c + s, c + 2s, ... (c = i mod g, g =
  // gcd(n, s)); its step number along it is ((i - c) / g) / (s / g) mod n / g.
  const uint64_t n = order_.size(), s = shifts_.at(j), i = position_.at(rank);
  const uint64_t g = std::gcd(n, s), len = n / g;
  const uint64_t step = ((i - i % g) / g) % len * inverse_mod((s / g) % len, len) % len;
  return step % 2 == 0;
}

}  // namespace sigma::checkpoint
