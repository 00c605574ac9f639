// Top-k routing and capacity, one rank, no communication.
#include <sigma/parallel.hpp>

#include <gtest/gtest.h>

#include <cmath>

namespace sigma::parallel {
namespace {

RouterOptions opts(uint32_t k, double cf, DropPolicy drop = DropPolicy::probability, bool normalize = true) {
  RouterOptions o;
  o.num_experts = 4;
  o.top_k = k;
  o.capacity_factor = cf;
  o.drop = drop;
  o.normalize_top_k = normalize;
  return o;
}

TEST(MoeRouter, PicksTheTopKBySoftmaxWithTiesToTheLowerExpert) {
  const float logits[] = {0, 3, 1, 3,  // tie between 1 and 3
                          5, 0, 0, 0};
  const Routing r = route(logits, 2, opts(2, 0));
  EXPECT_EQ(r.expert_ids, (std::vector<int32_t>{1, 3, 0, 1}));
  EXPECT_FLOAT_EQ(r.weights[0], 0.5f);
  EXPECT_FLOAT_EQ(r.weights[1], 0.5f);
  EXPECT_FLOAT_EQ(r.weights[2] + r.weights[3], 1.0f);
  const Routing raw = route(logits, 2, opts(2, 0, DropPolicy::probability, false));
  const float p0 = std::exp(5.f) / (std::exp(5.f) + 3);
  EXPECT_NEAR(raw.weights[2], p0, 1e-6);
}

// Six tokens all preferring expert 0; capacity ceil(1.0 * 6 / 4) = 2.
std::vector<float> crowd() {
  std::vector<float> l;
  const float pull[] = {1, 4, 2, 3, 0.5f, 5};  // how strongly each token wants expert 0
  for (float p : pull) l.insert(l.end(), {p + 5, 0, 0, 0});
  return l;
}

TEST(MoeRouter, CapacityByProbabilityKeepsTheMostConfidentChoices) {
  const auto l = crowd();
  const Routing r = route(l.data(), 6, opts(1, 1.0));
  EXPECT_EQ(r.capacity, 2u);
  EXPECT_EQ(r.expert_ids, (std::vector<int32_t>{-1, 0, -1, -1, -1, 0}));
  EXPECT_EQ(r.stats.routed[0], 6u) << "the statistics count every choice, dropped or not";
  EXPECT_EQ(r.stats.kept[0], 2u);
  EXPECT_EQ(r.stats.dropped(), 4u);
}

TEST(MoeRouter, CapacityByPositionKeepsTheFirstChoices) {
  const auto l = crowd();
  const Routing r = route(l.data(), 6, opts(1, 1.0, DropPolicy::position));
  EXPECT_EQ(r.expert_ids, (std::vector<int32_t>{0, 0, -1, -1, -1, -1}));
}

TEST(MoeRouter, AuxLossIsOneWhenBalancedAndCountsDroppedChoices) {
  const float balanced[] = {9, 0, 0, 0, 0, 9, 0, 0, 0, 0, 9, 0, 0, 0, 0, 9};
  EXPECT_NEAR(route(balanced, 4, opts(1, 0)).stats.aux_loss(), 1.0, 1e-3);
  const auto l = crowd();
  const double dropless = route(l.data(), 6, opts(1, 0)).stats.aux_loss();
  const double capped = route(l.data(), 6, opts(1, 1.0)).stats.aux_loss();
  EXPECT_GT(dropless, 3.5);
  EXPECT_DOUBLE_EQ(capped, dropless) << "capacity must not hide the imbalance from the loss";
}

TEST(MoeRouter, ZeroTokensGiveAnEmptyRouting) {
  const Routing r = route(nullptr, 0, opts(2, 1.0));
  EXPECT_TRUE(r.expert_ids.empty());
  EXPECT_EQ(r.stats.aux_loss(), 0);
}

TEST(MoeRouter, RefusesBadOptionsAndNonFiniteLogitsNamingTheToken) {
  const float l[] = {0, 0, 0, 0, 0, NAN, 0, 0};
  EXPECT_THROW(route(l, 1, opts(5, 0)), Error);
  EXPECT_THROW(route(l, 1, opts(0, 0)), Error);
  EXPECT_THROW(route(l, 1, opts(1, -1)), Error);
  try {
    route(l, 2, opts(1, 0));
    ADD_FAILURE() << "a NaN logit was routed";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("token 1"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace sigma::parallel
