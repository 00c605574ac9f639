// Experts through a checkpoint onto another world size: 4 ranks (dp 4,
// ep 2: each block of 4 experts held by two replicas) save their expert
// blocks and a dense weight; restores on 1, 2, 4 and 8 ranks (ep 1, 2, 4, 8)
// read each rank's new block of experts, bit for bit, and the layout back
// from the metadata. Real files, one checkpoint engine per rank.
#include <sigma/checkpoint.hpp>
#include <sigma/parallel.hpp>

#include <gtest/gtest.h>

#include <filesystem>

namespace sigma::parallel {
namespace {

constexpr uint32_t kExperts = 8;
constexpr int64_t kRows = 32, kCols = 40;  // one expert's weight: 5 KiB

float value(uint32_t expert, int64_t i) {
  return static_cast<float>(expert) * 100.f + static_cast<float>(i) * 0.5f;
}

// The expert block of ep_index of ep, as the training state holds it.
std::vector<float> block(uint32_t ep, uint32_t ep_index) {
  const ExpertRange r = expert_range(kExperts, ep, ep_index);
  std::vector<float> out;
  for (uint32_t e = r.first; e < r.first + r.count; ++e)
    for (int64_t i = 0; i < kRows * kCols; ++i) out.push_back(value(e, i));
  return out;
}

checkpoint::Options options(const std::string& dir, uint32_t rank, uint32_t world) {
  checkpoint::Options o;
  o.dir = dir;
  o.rank = rank;
  o.world = world;
  o.chunk_bytes = 4096;  // chunks that cut across experts
  return o;
}

TEST(ExpertReshard, ABlockSavedByReplicasRestoresOntoAnyExpertParallelism) {
  const std::string dir = ::testing::TempDir() + "expert-reshard-" + std::to_string(::getpid());
  std::filesystem::remove_all(dir);
  const Layout saved{4, 2, 1};
  std::vector<float> dense(7);
  for (size_t i = 0; i < dense.size(); ++i) dense[i] = static_cast<float>(i) - 3.f;
  for (uint32_t rank = 0; rank < saved.world(); ++rank) {
    const Coords c = coords_of(saved, rank);
    auto experts = block(saved.ep, c.ep_index);
    auto d = dense;
    checkpoint::Engine engine(options(dir, rank, saved.world()));
    checkpoint::Metadata meta;
    meta.step = 10;
    meta.parallel_plan = layout_json(saved, kExperts);
    engine.save({expert_shard({"layer0.experts.w",
                               HAL_DTYPE_F32,
                               {static_cast<int64_t>(experts.size() / (kRows * kCols)), kRows, kCols},
                               experts.data()},
                              kExperts, saved.ep, c.ep_index),
                 checkpoint::replicated({"layer0.attn.w", HAL_DTYPE_F32, {7}, d.data()})},
                meta);
  }
  for (uint32_t world : {1u, 2u, 4u, 8u}) {
    const Layout now{world, world, 1};
    for (uint32_t rank = 0; rank < world; ++rank) {
      const ExpertRange r = expert_range(kExperts, now.ep, rank);
      std::vector<float> experts(r.count * kRows * kCols, -1.f), d(7, -1.f);
      checkpoint::Engine engine(options(dir, rank, world));
      checkpoint::Metadata meta;
      const auto res =
          engine.restore({expert_shard({"layer0.experts.w",
                                        HAL_DTYPE_F32,
                                        {static_cast<int64_t>(r.count), kRows, kCols},
                                        experts.data()},
                                       kExperts, now.ep, rank),
                          checkpoint::replicated({"layer0.attn.w", HAL_DTYPE_F32, {7}, d.data()})},
                         &meta);
      EXPECT_EQ(res.step, 10u);
      EXPECT_EQ(experts, block(now.ep, rank)) << "world " << world << " rank " << rank;
      EXPECT_EQ(d, dense) << "world " << world << " rank " << rank;
      uint32_t experts_saved = 0;
      const Layout back = parse_layout_json(meta.parallel_plan, &experts_saved);
      EXPECT_EQ(back.dp, 4u);
      EXPECT_EQ(back.ep, 2u);
      EXPECT_EQ(experts_saved, kExperts);
    }
  }
  std::filesystem::remove_all(dir);
}

TEST(ExpertReshard, ABlockOfTheWrongSizeOrABadPlanIsRefused) {
  std::vector<float> x(3 * kRows * kCols);
  EXPECT_THROW(expert_shard({"w", HAL_DTYPE_F32, {3, kRows, kCols}, x.data()}, kExperts, 2, 0), Error);
  EXPECT_THROW(expert_shard({"w", HAL_DTYPE_F32, {3, kRows, kCols}, x.data()}, kExperts, 3, 0), Error);
  EXPECT_THROW(parse_layout_json("not json"), Error);
  EXPECT_THROW(parse_layout_json(R"({"dp":4,"ep":3,"pp":1,"experts":8})"), Error);
  EXPECT_THROW(parse_layout_json(R"({"dp":4,"ep":2,"pp":0,"experts":8})"), Error);
  EXPECT_THROW(parse_layout_json(R"({"dp":4,"ep":4,"pp":1,"experts":6})"), Error);
  EXPECT_NO_THROW(parse_layout_json(layout_json({4, 2, 1}, 8)));
  // Interleaving travels with the layout; a plan written before it existed reads as vpp 1.
  EXPECT_EQ(parse_layout_json(layout_json({2, 2, 2, 3}, 8)).vpp, 3u);
  EXPECT_EQ(parse_layout_json(R"({"dp":4,"ep":2,"pp":1,"experts":8})").vpp, 1u);
  EXPECT_THROW(parse_layout_json(R"({"dp":4,"ep":2,"pp":1,"vpp":2,"experts":8})"), Error);
}

}  // namespace
}  // namespace sigma::parallel
