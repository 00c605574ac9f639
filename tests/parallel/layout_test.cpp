// The DP x EP x PP layout: coordinates and groups by arithmetic, then the
// real communicators of eight ranks (dp 4, ep 2, pp 2): an all-reduce of the
// world ranks in each group must give the sum of the members the layout
// names.
#include "ranks.hpp"

#include <sigma/parallel.hpp>

#include <gtest/gtest.h>

#include <fstream>
#include <numeric>
#include <set>

namespace sigma::parallel {
namespace {

TEST(ParallelLayout, RejectsDegreesThatDoNotFitTheWorldSayingWhich) {
  EXPECT_THROW(check_layout({4, 3, 1}, 4), Error);
  EXPECT_THROW(check_layout({4, 2, 2}, 6), Error);
  EXPECT_THROW(check_layout({0, 1, 1}, 0), Error);
  try {
    check_layout({4, 3, 1}, 4);
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Code::invalid_argument);
    EXPECT_NE(std::string(e.what()).find("ep must divide dp"), std::string::npos) << e.what();
  }
  EXPECT_NO_THROW(check_layout({4, 2, 2}, 8));
  EXPECT_NO_THROW(check_layout({4, 2, 2, 2}, 8));
  EXPECT_THROW(check_layout({4, 2, 2, 0}, 8), Error);
  try {
    check_layout({4, 2, 1, 2}, 4);
    ADD_FAILURE() << "interleaving one stage";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("two pipeline stages"), std::string::npos) << e.what();
  }
}

TEST(ParallelLayout, EveryKindPartitionsTheWorldAndExpertGroupsAreConsecutive) {
  const Layout l{4, 2, 2};
  for (GroupKind kind : {GroupKind::data, GroupKind::expert, GroupKind::expert_data, GroupKind::pipeline}) {
    std::set<uint32_t> seen;
    for (uint32_t r = 0; r < l.world(); ++r) {
      const auto m = group_members(l, r, kind);
      EXPECT_NE(std::find(m.begin(), m.end(), r), m.end());
      // Every member agrees on the group and its members.
      for (uint32_t q : m) {
        EXPECT_EQ(group_members(l, q, kind), m) << group_kind_name(kind);
        EXPECT_EQ(group_index(l, q, kind), group_index(l, r, kind));
      }
      seen.insert(group_index(l, r, kind));
    }
    const size_t size = group_members(l, 0, kind).size();
    EXPECT_EQ(seen.size() * size, l.world()) << group_kind_name(kind);
  }
  EXPECT_EQ(group_members(l, 5, GroupKind::expert), (std::vector<uint32_t>{4, 5}));
  EXPECT_EQ(group_members(l, 5, GroupKind::expert_data), (std::vector<uint32_t>{5, 7}));
  EXPECT_EQ(group_members(l, 5, GroupKind::pipeline), (std::vector<uint32_t>{1, 5}));
  EXPECT_EQ(group_members(l, 5, GroupKind::data), (std::vector<uint32_t>{4, 5, 6, 7}));
}

TEST(ParallelLayout, ExpertsAreShardedInContiguousBlocks) {
  EXPECT_EQ(expert_range(8, 4, 2).first, 4u);
  EXPECT_EQ(expert_range(8, 4, 2).count, 2u);
  EXPECT_THROW(expert_range(8, 3, 0), Error);
  EXPECT_THROW(expert_range(8, 4, 4), Error);
}

TEST(ParallelGroups, EachCommunicatorReachesExactlyItsMembers) {
  const Layout l{4, 2, 2};
  const std::string dir = test::run_ranks(SIGMA_PARALLEL_WORKER, "groups", l.world());
  for (uint32_t r = 0; r < l.world(); ++r) {
    std::ifstream in(dir + "/groups-" + std::to_string(r));
    for (GroupKind kind : {GroupKind::data, GroupKind::expert, GroupKind::expert_data, GroupKind::pipeline}) {
      std::string name;
      uint32_t rank_in = 0, size = 0;
      uint64_t sum = 0;
      ASSERT_TRUE(in >> name >> rank_in >> size >> sum) << "rank " << r;
      const auto m = group_members(l, r, kind);
      EXPECT_EQ(name, group_kind_name(kind));
      EXPECT_EQ(size, m.size());
      EXPECT_EQ(m.at(rank_in), r);
      EXPECT_EQ(sum, std::accumulate(m.begin(), m.end(), uint64_t{0})) << "rank " << r << " " << name;
    }
    std::string wrap, code;
    ASSERT_TRUE(in >> wrap >> code) << "rank " << r;
    EXPECT_EQ(wrap + " " + code, "no_wrap invalid_argument") << "rank " << r;
  }
}

}  // namespace
}  // namespace sigma::parallel
