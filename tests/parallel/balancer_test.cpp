// The autotuner's decisions, pure: a rank whose link turns slow loses its
// experts after trigger_steps, gets them back after recover_steps healthy
// ones, a flapping link moves nothing back and forth, and what cannot move
// stays.
#include <sigma/autotune.hpp>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace sigma::parallel {
namespace {

std::vector<RankSample> samples(uint32_t ep, int slow_rank) {
  std::vector<RankSample> s(ep, RankSample{0.010, 0});
  if (slow_rank >= 0) s[static_cast<size_t>(slow_rank)] = {0.011, 400};
  return s;
}

TEST(ExpertBalancer, ASlowRankLosesItsExpertsAfterTriggerStepsAndGetsThemBackAfterRecovery) {
  BalancerOptions o;
  o.trigger_steps = 3;
  o.recover_steps = 10;
  ExpertBalancer b(8, 4, o);
  std::vector<Rebalance> seen;
  for (uint64_t step = 0; step < 100; ++step) {
    const bool slow = step >= 20 && step < 50;
    if (auto r = b.observe(step, samples(4, slow ? 2 : -1))) seen.push_back(*r);
  }
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_EQ(seen[0].step, 22u) << "the third slow step";
  for (uint32_t e : {4u, 5u}) EXPECT_NE(seen[0].owner[e], 2u);
  EXPECT_EQ(seen[0].moves.size(), 2u);
  EXPECT_NE(seen[0].reason.find("rank 2 slow for 3 steps: 400 link retries/s"), std::string::npos)
      << seen[0].reason;
  EXPECT_EQ(seen[1].step, 59u) << "the tenth healthy step";
  EXPECT_EQ(seen[1].owner, (std::vector<uint32_t>{0, 0, 1, 1, 2, 2, 3, 3}));
  const auto j = nlohmann::json::parse(rebalance_json(seen[0]));
  EXPECT_EQ(j["moves"].size(), 2u);
  EXPECT_EQ(j["samples"][2]["link_retries_per_s"].get<double>(), 400);
}

// With slow_token_share < 1 the slow rank also takes fewer tokens while its
// experts are away; the others split the rest, and all is even again when
// they come back. Tokens split exactly by the shares.
TEST(ExpertBalancer, ASlowRankTakesItsTokenShareWhileAwayAndAnEvenOneAfter) {
  BalancerOptions o;
  o.trigger_steps = 3;
  o.recover_steps = 10;
  o.slow_token_share = 0.5;
  ExpertBalancer b(8, 4, o);
  std::vector<Rebalance> seen;
  for (uint64_t step = 0; step < 100; ++step)
    if (auto r = b.observe(step, samples(4, step >= 20 && step < 50 ? 2 : -1))) seen.push_back(*r);
  ASSERT_EQ(seen.size(), 2u);
  const double other = (4 - 0.5) / 3;
  EXPECT_EQ(seen[0].token_share, (std::vector<double>{other, other, 0.5, other}));
  EXPECT_NE(seen[0].reason.find("takes 0.50 of an even share of the tokens"), std::string::npos)
      << seen[0].reason;
  EXPECT_EQ(seen[1].token_share, (std::vector<double>(4, 1.0)));
  EXPECT_EQ(b.token_share(), (std::vector<double>(4, 1.0)));
  const auto j = nlohmann::json::parse(rebalance_json(seen[0]));
  EXPECT_DOUBLE_EQ(j["token_share"][2].get<double>(), 0.5);

  EXPECT_EQ(split_tokens(192, seen[0].token_share), (std::vector<uint64_t>{56, 56, 24, 56}));
  EXPECT_EQ(split_tokens(10, {1, 1, 1}), (std::vector<uint64_t>{4, 3, 3}));
  EXPECT_EQ(split_tokens(0, {1, 2}), (std::vector<uint64_t>{0, 0}));
  EXPECT_THROW(split_tokens(5, {0, 0}), Error);
  EXPECT_THROW(split_tokens(5, {1, -1}), Error);
  EXPECT_THROW(ExpertBalancer(8, 4,
                              [] {
                                BalancerOptions bad;
                                bad.slow_token_share = 0;
                                return bad;
                              }()),
               Error);

  // A rank that holds no experts still gets its smaller share.
  ExpertBalancer c(4, 4, o);
  c.restore_state(R"({"experts":4,"ep":4,"owner":[0,1,3,3],"slow_steps":[0,0,0,0],"healthy_steps":[0,0,0,0],)"
                  R"("evacuated":[false,false,false,false]})");
  std::optional<Rebalance> r;
  for (uint64_t step = 0; step < 3 && !r; ++step) r = c.observe(step, samples(4, 2));
  ASSERT_TRUE(r.has_value());
  EXPECT_TRUE(r->moves.empty());
  EXPECT_DOUBLE_EQ(r->token_share[2], 0.5);
}

// A balancer restored from a snapshot decides as the one that never stopped.
TEST(ExpertBalancer, ARestoredStateDecidesAsTheOriginal) {
  BalancerOptions o;
  o.trigger_steps = 3;
  o.recover_steps = 5;
  ExpertBalancer a(8, 4, o);
  for (uint64_t step = 0; step < 24; ++step) a.observe(step, samples(4, step >= 20 ? 2 : -1));
  ExpertBalancer b(8, 4, o);
  b.restore_state(a.save_state());
  EXPECT_EQ(b.owner(), a.owner());
  EXPECT_TRUE(b.evacuated(2));
  EXPECT_EQ(b.token_share(), a.token_share());
  int decided = 0;
  for (uint64_t step = 24; step < 40; ++step) {
    const auto ra = a.observe(step, samples(4, -1)), rb = b.observe(step, samples(4, -1));
    ASSERT_EQ(ra.has_value(), rb.has_value()) << "step " << step;
    if (ra) {
      ++decided;
      EXPECT_EQ(ra->owner, rb->owner);
    }
  }
  // The window holds a decision to compare: rank 2, healthy again for
  // recover_steps, gets its experts back in both.
  EXPECT_GE(decided, 1) << "no rebalance in the window: the comparison saw nothing";
  EXPECT_FALSE(a.evacuated(2));
  EXPECT_FALSE(b.evacuated(2));
  EXPECT_EQ(b.owner(), a.owner());
  EXPECT_THROW(b.restore_state("{}"), Error);
  EXPECT_THROW(b.restore_state("not json"), Error);
  ExpertBalancer other(8, 2, o);
  EXPECT_THROW(other.restore_state(a.save_state()), Error) << "another group's state";
}

TEST(ExpertBalancer, AnExchangeFarAboveTheMedianCountsAsSlowWhenAsked) {
  ExpertBalancer off(4, 4);
  for (uint64_t step = 0; step < 10; ++step) {
    auto s = samples(4, -1);
    s[1].exchange_s = 0.05;
    EXPECT_FALSE(off.observe(step, s)) << "exchange times are not a signal by default";
  }
  BalancerOptions o;
  o.slow_ratio = 2;
  ExpertBalancer b(4, 4, o);
  std::optional<Rebalance> r;
  for (uint64_t step = 0; step < 3 && !r; ++step) {
    auto s = samples(4, -1);
    s[1].exchange_s = 0.05;  // 5x the median, no retries reported
    r = b.observe(step, s);
  }
  ASSERT_TRUE(r);
  EXPECT_NE(r->owner[1], 1u);
}

TEST(ExpertBalancer, AFlappingLinkDoesNotThrash) {
  BalancerOptions o;
  o.trigger_steps = 3;
  o.recover_steps = 20;
  ExpertBalancer b(8, 4, o);
  int moves = 0;
  for (uint64_t step = 0; step < 400; ++step) {
    const bool slow = (step / 8) % 2 == 1;  // 8 slow, 8 fast, ...
    if (b.observe(step, samples(4, slow ? 3 : -1))) ++moves;
  }
  EXPECT_EQ(moves, 1) << "off once, and never back while it flaps";
  EXPECT_TRUE(b.evacuated(3));
}

TEST(ExpertBalancer, ExpertsMoveOnlyWhereThereIsRoom) {
  BalancerOptions o;
  o.max_experts_per_rank = 2;  // already full everywhere
  ExpertBalancer b(4, 2, o);
  for (uint64_t step = 0; step < 10; ++step) EXPECT_FALSE(b.observe(step, samples(2, 0))) << step;
  EXPECT_EQ(b.owner(), (std::vector<uint32_t>{0, 0, 1, 1}));
  EXPECT_THROW(b.observe(10, samples(3, -1)), Error);
  EXPECT_THROW(ExpertBalancer(6, 4), Error);
}

}  // namespace
}  // namespace sigma::parallel
