// The check that a host's memory tiers fit it, without processes.
#include "runtime/tier_fit.hpp"

#include <sigma/memory_tier.hpp>

#include <gtest/gtest.h>

namespace sigma::runtime {
namespace {

TEST(TierFit, TheFootprintCountsOwnReplicasTheOneBeingReplacedAndThoseArriving) {
  EXPECT_EQ(checkpoint::MemoryTier::footprint(100, 2, 1), 100u * (2 + 2 + 1 + 1));
  EXPECT_EQ(checkpoint::MemoryTier::footprint(100, 2, 2), 100u * (2 + 4 + 1 + 2));
  EXPECT_EQ(checkpoint::MemoryTier::footprint(100, 1, 0), 100u * 2);
}

TEST(TierFit, WhatFitsPassesAndWhatDoesNotIsRefusedWithItsNumbers) {
  const uint64_t mib = 1 << 20;
  // 4 ranks x 6 copies x 1 MiB = 24 MiB.
  EXPECT_FALSE(tier_unfit(mib, 2, 1, 4, 24 * mib, "the host's available memory").has_value());
  const auto why = tier_unfit(mib, 2, 1, 4, 24 * mib - 1, "SIGMA_TIER_MEMORY_BYTES");
  ASSERT_TRUE(why.has_value());
  EXPECT_NE(why->find("4 rank(s) need 4 x 6 x 1.0 MiB = 24.0 MiB"), std::string::npos) << *why;
  EXPECT_NE(why->find("SIGMA_TIER_MEMORY_BYTES is 24.0 MiB"), std::string::npos) << *why;
  EXPECT_NE(why->find("--snapshot-keep"), std::string::npos) << *why;
}

TEST(TierFit, TheHostsAvailableMemoryIsRead) { EXPECT_GT(host_memory_available(), uint64_t{1} << 20); }

}  // namespace
}  // namespace sigma::runtime
