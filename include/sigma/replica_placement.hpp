// sigma/replica_placement.hpp -- where the memory tier keeps each rank's
// replicas: in another failure domain (a node, a rack) than the rank itself,
// so that losing a whole domain leaves a copy of every state it held.
//
//   // ranks 0,1 on node 0, ranks 2,3 on node 1; one replica each
//   auto p = sigma::checkpoint::ReplicaPlacement::across({0, 0, 1, 1}, 1);
//   p.holder(0, 0);  // 2: rank 0's replica lives on node 1
//
// The rule: the ranks are ordered by domain (then by rank), and replica j
// of the rank at position i goes to the rank at position i + shift[j]. With
// m the largest domain's size, every shift in [m, world - m] crosses
// domains; the first replica takes m, the second 2m when that is in range
// (its holder then also differs in domain from the first's), else m + 1,
// else (two domains of more than a third each) 1, in the owner's own
// domain. When no shift crosses for every rank (one domain holds more than
// half of them), the shifts are 1 and 2: a ring along the domains' order,
// which crosses at each domain's boundary -- for a single domain (one host)
// the ring of ranks, r's replica on r + 1 -- and crossing() is 0.
//
// Pure and deterministic: every rank, the agent and the cluster simulator
// compute the same placement from the same domains. Thread-safety: const
// members from any thread.
#pragma once

#include <sigma/export.hpp>

#include <cstdint>
#include <vector>

namespace sigma::checkpoint {

class SIGMA_EXPORT ReplicaPlacement {
 public:
  // Rank r's replica on rank r + 1, for a world of `world` (no replica for
  // world 1). Crosses no domain.
  static ReplicaPlacement ring(uint32_t world);
  // `domain_of_rank[r]`: rank r's failure domain (any numbering).
  // `replicas`: 1 or 2 (Error(invalid_argument) otherwise); fewer when the
  // world is too small to hold that many distinct holders (world 2: one).
  static ReplicaPlacement across(const std::vector<uint32_t>& domain_of_rank, uint32_t replicas);

  uint32_t world() const { return static_cast<uint32_t>(order_.size()); }
  // Replicas each rank has (0 for world 1).
  uint32_t replicas() const { return static_cast<uint32_t>(shifts_.size()); }
  // How many of each rank's replicas are held in another domain than its
  // owner's (the first ones); cross_domain(): all of them.
  uint32_t crossing() const { return crossing_; }
  bool cross_domain() const { return crossing_ == replicas() && crossing_ > 0; }
  // The rank holding replica `j` of `rank`, and the rank whose replica `j`
  // `rank` holds.
  uint32_t holder(uint32_t rank, uint32_t j) const;
  uint32_t source(uint32_t rank, uint32_t j) const;
  // In the exchange of replica `j`, whether `rank` sends before it
  // receives: ranks alternate along each cycle of the shift, so blocking
  // sends never wait on each other in a circle.
  bool sends_first(uint32_t rank, uint32_t j) const;
  const std::vector<uint32_t>& shifts() const { return shifts_; }

 private:
  std::vector<uint32_t> order_;     // ranks grouped by domain
  std::vector<uint32_t> position_;  // rank -> its index in order_
  std::vector<uint32_t> shifts_;    // one per replica
  uint32_t crossing_ = 0;
};

}  // namespace sigma::checkpoint
