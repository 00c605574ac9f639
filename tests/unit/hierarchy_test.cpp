// The scheduler tree against the flat scheduler: locality in the flat one,
// escalation and lending in the tree, and the same decisions from both on
// long random event sequences.
#include <sigma/hierarchy.hpp>

#include <gtest/gtest.h>

#include <random>
#include <tuple>

namespace sigma::scheduler {
namespace {

using K = Action::Kind;

Config grouped(uint32_t world, uint32_t group_size) {
  Config c;
  c.world_size = world;
  c.group_size = group_size;
  return c;
}

template <class S>
void bring_up(S& s, uint32_t n) {
  for (uint32_t d = 0; d < n; ++d) {
    s.add_device(d, 0);
    s.validation_done(d, true, "ok", 0);
  }
  s.start(1);
}

TEST(Locality, StartSpreadsTheRanksSoEveryGroupKeepsSpares) {
  Scheduler s(grouped(12, 8));  // 16 devices in 2 groups: 6 ranks and 2 spares each
  bring_up(s, 16);
  EXPECT_EQ(s.spares(), (std::vector<uint32_t>{6, 7, 14, 15}));
  EXPECT_EQ(s.device_of(5), 5u);
  EXPECT_EQ(s.device_of(6), 8u);
  EXPECT_EQ(split_world(10, {8, 8, 3}), (std::vector<uint32_t>{5, 4, 1}));
  EXPECT_THROW(split_world(20, {8, 8, 3}), Error);
}

TEST(Locality, AFaultTakesASpareOfItsOwnGroupFirstAndAnotherGroupsLast) {
  Scheduler s(grouped(12, 8));
  bring_up(s, 16);
  auto a = s.on_fault(9, "crash", true, 2);  // rank 7, group 1
  ASSERT_EQ(a[2].kind, K::replace);
  EXPECT_EQ(a[2].to_device, 14u);
  s.on_fault(14, "crash", true, 3);
  a = s.on_fault(15, "crash", true, 4);  // group 1 is out: group 0's lowest
  EXPECT_EQ(a[2].to_device, 6u);
}

TEST(Locality, AWarningMigratesOnlyWithinItsGroup) {
  Scheduler s(grouped(14, 8));  // 7 ranks and 1 spare per group
  bring_up(s, 16);
  s.on_fault(15, "spare died", false, 2);  // group 1 has no spare now
  s.on_warning(8, "hot", 3);
  EXPECT_FALSE(s.pending_migration(8));
  EXPECT_TRUE(s.at_step_boundary(1, 4).empty());
  s.on_warning(0, "hot", 5);
  EXPECT_EQ(s.pending_migration(0), 7u);
}

TEST(Hierarchy, AGroupSettlesWhatItCanAndEscalatesTheRest) {
  Hierarchy h(grouped(12, 8));  // ranks 0-5 on 0-5, spares 6, 7; ranks 6-11 on 8-13, spares 14, 15
  bring_up(h, 16);
  EXPECT_EQ(h.groups(), 2u);
  EXPECT_EQ(h.rank_of(8), 6u);
  EXPECT_EQ(h.on_fault(9, "crash", true, 2)[2].to_device, 14u);
  EXPECT_EQ(h.on_fault(10, "crash", true, 3)[2].to_device, 15u);
  EXPECT_EQ(h.traffic().root_calls, 0u);
  auto a = h.on_fault(8, "crash", true, 4);  // rank 6; group 1 has nothing left
  ASSERT_EQ(a.size(), 5u);
  EXPECT_EQ(a[2].kind, K::escalate);
  EXPECT_EQ(a[3].kind, K::replace);
  EXPECT_EQ(a[3].to_device, 6u);
  EXPECT_EQ(a[4].tier, "memory");
  EXPECT_EQ(h.owner_group(6), 1u);
  EXPECT_EQ(h.rank_of(6), 6u);
  EXPECT_EQ(h.traffic().root_calls, 1u);
  // Device 6 fails where it is lent and goes home for repair.
  a = h.on_fault(6, "crash", false, 5);
  EXPECT_EQ(a[3].to_device, 7u);
  EXPECT_EQ(a[4].tier, "disk");
  EXPECT_EQ(h.owner_group(6), 1u);
  h.on_repaired(6, 6);
  EXPECT_EQ(h.owner_group(6), 0u);
  EXPECT_EQ(h.state(6), DeviceState::validating);
  EXPECT_TRUE(h.spares().empty());
}

TEST(Hierarchy, APausedJobTakesTheNextValidatedDeviceWhereverItIs) {
  Hierarchy h(grouped(8, 4));  // 8 devices, no spares
  bring_up(h, 8);
  EXPECT_EQ(h.on_fault(1, "crash", true, 2).back().kind, K::pause);
  EXPECT_EQ(h.on_fault(5, "crash", true, 3).back().kind, K::pause);
  EXPECT_TRUE(h.paused());
  EXPECT_THROW(h.on_repaired(6, 4), Error);  // in use, not cordoned
  h.on_repaired(5, 4);
  auto a = h.validation_done(5, true, "ok", 5);
  ASSERT_EQ(a.size(), 3u);  // admit, replace (rank 1, the longest waiting, on 5), restore
  EXPECT_EQ(a[1].rank, 1u);
  EXPECT_EQ(a[1].to_device, 5u);
  EXPECT_EQ(a[2].tier, "disk");
  EXPECT_EQ(h.owner_group(5), 0u);
  EXPECT_TRUE(h.paused());
  h.on_repaired(1, 6);
  a = h.validation_done(1, true, "ok", 7);
  ASSERT_EQ(a.size(), 4u);
  EXPECT_EQ(a[1].rank, 5u);
  EXPECT_EQ(a[3].kind, K::resume);
  EXPECT_FALSE(h.paused());
  EXPECT_EQ(h.device_of(1), 5u);
  EXPECT_EQ(h.device_of(5), 1u);
}

// One random event for both: a warning, a calm, a step boundary, a fault,
// or a repair and its validation.
struct Driver {
  std::mt19937_64 rng;
  uint32_t n;
  uint32_t pick() { return static_cast<uint32_t>(rng() % n); }
};

using Key = std::tuple<int, uint32_t, uint32_t, uint32_t, uint32_t, std::string>;

std::vector<Key> decisions(const std::vector<Action>& actions) {
  std::vector<Key> out;
  for (const Action& a : actions) {
    if (a.kind == K::escalate) continue;
    out.emplace_back(static_cast<int>(a.kind), a.device, a.rank, a.to_device, a.world_size, a.tier);
  }
  std::sort(out.begin(), out.end());  // actions of one call happen together
  return out;
}

void compare(uint64_t seed, bool shrink, bool interleaved = false) {
  Config c = grouped(52, 8);  // 64 devices in 8 groups
  if (interleaved) {          // groups of ids that are not consecutive, as sigmarun's nodes
    c.group_size = 0;
    for (uint32_t d = 0; d < 64; ++d) c.groups.push_back(d % 8);
  }
  c.allow_shrink = shrink;
  c.min_world_size = 40;
  Scheduler flat(c);
  Hierarchy tree(c);
  bring_up(flat, 64);
  bring_up(tree, 64);
  Driver drv{std::mt19937_64(seed), 64};
  for (int i = 0; i < 3000; ++i) {
    const uint32_t d = drv.pick();
    const double t = 2.0 + i;
    std::vector<Action> a, b;
    switch (drv.rng() % 6) {
      case 0:
        a = flat.on_warning(d, "hot", t), b = tree.on_warning(d, "hot", t);
        break;
      case 1:
        a = flat.on_calm(d, t), b = tree.on_calm(d, t);
        break;
      case 2:
        a = flat.at_step_boundary(i, t), b = tree.at_step_boundary(i, t);
        break;
      case 3: {
        const bool memory = drv.rng() % 2;
        a = flat.on_fault(d, "crash", memory, t), b = tree.on_fault(d, "crash", memory, t);
        break;
      }
      default:
        if (flat.state(d) == DeviceState::cordoned) {
          const bool pass = drv.rng() % 4 != 0;
          a = flat.on_repaired(d, t), b = tree.on_repaired(d, t);
          ASSERT_EQ(decisions(a), decisions(b)) << "seed " << seed << " event " << i;
          a = flat.validation_done(d, pass, "v", t), b = tree.validation_done(d, pass, "v", t);
        }
    }
    ASSERT_EQ(decisions(a), decisions(b)) << "seed " << seed << " event " << i << " device " << d;
    ASSERT_EQ(flat.paused(), tree.paused());
    ASSERT_EQ(flat.world_size(), tree.world_size());
  }
  for (uint32_t d = 0; d < 64; ++d) {
    EXPECT_EQ(flat.state(d), tree.state(d)) << d;
    EXPECT_EQ(flat.rank_of(d), tree.rank_of(d)) << d;
  }
  EXPECT_EQ(flat.spares(), tree.spares());
  EXPECT_GT(tree.traffic().root_calls, 0u);
  EXPECT_LT(tree.traffic().root_calls, tree.traffic().group_calls);
}

TEST(Hierarchy, MakesTheFlatSchedulersDecisionsOnRandomEvents) {
  for (uint64_t seed = 1; seed <= 20; ++seed) compare(seed, false);
}

TEST(Hierarchy, MakesTheFlatSchedulersDecisionsWhenTheJobShrinks) {
  for (uint64_t seed = 101; seed <= 120; ++seed) compare(seed, true);
}

TEST(Hierarchy, MakesTheFlatSchedulersDecisionsWithGroupsOfScatteredIds) {
  for (uint64_t seed = 201; seed <= 220; ++seed) compare(seed, seed % 2 == 0, true);
}

}  // namespace
}  // namespace sigma::scheduler
