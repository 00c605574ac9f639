// The layout search: every combination of the space's values that covers
// the devices and fits in memory, priced by the cost model.
#include <sigma/error.hpp>
#include <sigma/planner.hpp>

#include <algorithm>
#include <numeric>

#include "memory.hpp"

namespace sigma::planner {

namespace {

std::vector<uint32_t> divisors(uint64_t n, uint64_t at_most) {
  std::vector<uint32_t> out;
  for (uint64_t i = 1; i <= std::min(n, at_most); ++i)
    if (n % i == 0) out.push_back(static_cast<uint32_t>(i));
  return out;
}

// The space's values for one dimension, or `all` when it gives none; only
// those that divide `n` are kept.
std::vector<uint32_t> pick(const std::vector<uint32_t>& given, const std::vector<uint32_t>& all, uint64_t n) {
  std::vector<uint32_t> out;
  for (uint32_t x : given.empty() ? all : given)
    if (x > 0 && n % x == 0) out.push_back(x);
  return out;
}

template <typename T>
std::vector<T> pick_enum(const std::vector<T>& given, std::vector<T> all) {
  return given.empty() ? all : given;
}

uint32_t experts_per_rank(const Model& m, const detail::Shape& shape, const Devices& d, const Framework& f,
                          const Efficiency& eff, const Candidate& c) {
  const double free_gib = eff.memory_usable * d.memory_gib - c.score.memory_gib;
  return detail::experts_within_memory(m, shape, c.layout, f, free_gib * static_cast<double>(1ull << 30));
}

// Every layout of the space over exactly d.count devices.
void search_count(const Model& m, const Devices& d, const Space& space, const Framework& f,
                  const Efficiency& eff, std::vector<Candidate>& found) {
  const detail::Shape shape = detail::shape_of(m);
  const auto recomputes =
      pick_enum(space.recompute, {Recompute::none, Recompute::selective, Recompute::full});
  const auto shardings = pick_enum(space.sharding, {Sharding::none, Sharding::optimizer, Sharding::full});
  const std::vector<uint32_t> cp_default =
      m.seq >= 16384 ? std::vector<uint32_t>{1, 2, 4, 8} : std::vector<uint32_t>{1};
  for (uint32_t tp : pick(space.tp, divisors(m.heads, d.per_node), d.count)) {
    if (m.heads % tp != 0 || (m.kv_heads % tp != 0 && tp % m.kv_heads != 0)) continue;
    for (uint32_t cp : pick(space.cp, cp_default, d.count / tp)) {
      for (uint32_t pp :
           pick(space.pp, divisors(d.count / tp / cp, m.layers + m.mtp_depth), d.count / tp / cp)) {
        const uint32_t dp = d.count / tp / cp / pp;
        if (dp > m.global_batch || pp > m.layers + m.mtp_depth) continue;
        if (f.schedule == Schedule::dualpipe && pp > 1 && pp % 2 != 0) continue;  // DualPipe pairs stages
        // Experts split over the data-parallel ranks, or with folding over
        // every rank of a stage.
        const uint32_t ep_of = std::gcd(f.moe_folding ? dp * tp * cp : dp, m.experts);
        for (uint32_t ep : pick(space.ep, divisors(ep_of, ep_of), ep_of)) {
          std::vector<uint32_t> vpps = space.vpp;
          const bool interleaving = f.interleaving && f.schedule == Schedule::one_f_one_b;
          const uint32_t layers = m.layers + m.mtp_depth;
          if (vpps.empty()) vpps = pp > 1 && interleaving ? divisors(840, 8) : std::vector<uint32_t>{1};
          for (uint32_t v : vpps) {
            if (v > 1 && (pp == 1 || !interleaving)) continue;
            if (static_cast<uint64_t>(pp) * v > layers) continue;
            if (!f.uneven_stages && layers % (pp * v) != 0) continue;
            for (uint32_t mb :
                 space.micro_batch.empty() ? std::vector<uint32_t>{1, 2, 4, 8} : space.micro_batch) {
              if (mb == 0 || static_cast<uint64_t>(mb) * dp > m.global_batch) continue;
              for (Recompute r : recomputes)
                for (Sharding s : shardings) {
                  const Layout l{tp, pp, dp, ep, cp, v, mb, r, s};
                  Candidate c{l, evaluate(m, d, l, f, eff), d.count, 0};
                  if (space.expert_headroom > 0 && ep > 1 &&
                      experts_per_rank(m, shape, d, f, eff, c) <
                          (m.experts + ep - 1) / ep + space.expert_headroom)
                    c.score.fits = false;
                  if (c.score.fits || !space.require_fit) found.push_back(c);
                }
            }
          }
        }
      }
    }
  }
}

}  // namespace

std::vector<Candidate> search(const Model& m, const Devices& d, const Space& space, const Framework& f,
                              const Efficiency& eff, size_t keep) {
  check(m, d);
  std::vector<Candidate> found;
  if (d.spares == 0) {
    search_count(m, d, space, f, eff, found);
  } else {
    // Hold at least the spares; whole nodes more where fewer devices divide
    // better (up to as many again and a node, at most 16 device counts).
    if (d.spares >= d.count) throw Error(Code::invalid_argument, "planner: spares leave no devices to plan");
    Devices working = d;
    working.spares = 0;
    // The devices less the spares, then whole nodes fewer.
    const uint32_t most = d.count - d.spares;
    const uint64_t held = 2ull * d.spares + d.per_node;
    const uint64_t least = d.count > held ? d.count - held : 1;
    std::vector<uint32_t> counts{most};
    for (uint64_t n = uint64_t{most} / d.per_node * d.per_node; n >= least && n > 0 && counts.size() < 16;
         n -= d.per_node)
      if (n != most) counts.push_back(static_cast<uint32_t>(n));
    for (uint32_t n : counts) {
      working.count = n;
      search_count(m, working, space, f, eff, found);
    }
  }
  // Layouts that fit first (where the space keeps others too), then the
  // shortest step; equal steps keep the enumeration's order.
  std::stable_sort(found.begin(), found.end(), [](const Candidate& a, const Candidate& b) {
    if (a.score.fits != b.score.fits) return a.score.fits;
    return a.score.step_s < b.score.step_s;
  });
  if (found.size() > keep) found.resize(keep);
  const detail::Shape shape = detail::shape_of(m);
  for (auto& c : found) c.max_experts_per_rank = experts_per_rank(m, shape, d, f, eff, c);
  return found;
}

}  // namespace sigma::planner
