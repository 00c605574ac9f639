// The checkpoint restore's plan without a disk: which old slice fills which
// range of each view, from a step manifest and shard records built in
// memory.
#include "checkpoint/restore_plan.hpp"

#include <sigma/error.hpp>

#include <gtest/gtest.h>

#include <map>

namespace sigma::checkpoint {
namespace {

using format::GlobalTensor;
using format::Piece;
using format::StepManifest;

// A 16 x 3 f32 tensor split by rows over `world` old ranks.
struct Saved {
  StepManifest m;
  std::map<std::pair<uint32_t, std::string>, format::Tensor> records;
  plan::Lookup lookup() const {
    return [this](uint32_t r, const std::string& name) -> const format::Tensor* {
      auto it = records.find({r, name});
      return it == records.end() ? nullptr : &it->second;
    };
  }
};

Saved split_rows(uint32_t world, const std::vector<int64_t>& bounds) {
  Saved s;
  s.m.world = world;
  GlobalTensor g;
  g.name = "w";
  g.layout = Layout::split;
  g.split_dim = 0;
  g.global_shape = {16, 3};
  for (uint32_t r = 0; r < world; ++r) {
    const int64_t lo = bounds[r], hi = bounds[r + 1];
    g.pieces.push_back({r, lo, hi - lo});
    format::Tensor t;
    t.name = "w";
    t.shape = {hi - lo, 3};
    t.bytes = static_cast<uint64_t>((hi - lo) * 3 * 4);
    t.layout = Layout::split;
    t.split_offset = lo;
    t.global_shape = {16, 3};
    s.records[{r, "w"}] = t;
  }
  s.m.tensors.push_back(g);
  return s;
}

TensorView rows(int64_t lo, int64_t hi) {
  return split(TensorView("w", HAL_DTYPE_F32, {hi - lo, 3}, nullptr), 0, lo, {16, 3});
}

TEST(CheckpointPlan, TheSameWorldAndPlaceReadsTheRanksOwnShardWhole) {
  const Saved s = split_rows(4, {0, 4, 8, 12, 16});
  const auto p = plan::make(s.m, "step-7", 2, 4, {rows(8, 12)}, s.lookup());
  ASSERT_EQ(p.views.size(), 1u);
  EXPECT_EQ(p.views[0].source, plan::View::Source::whole);
  EXPECT_TRUE(p.views[0].own);
  EXPECT_EQ(p.views[0].rank, 2u);
  EXPECT_FALSE(p.resharded);
}

TEST(CheckpointPlan, FewerRanksReadTheOverlappingRowsOfEachOldSlice) {
  const Saved s = split_rows(4, {0, 4, 8, 12, 16});
  // Rank 1 of 3 holds rows [6, 11): rows 6-7 of old rank 1, 8-10 of old rank 2.
  const auto p = plan::make(s.m, "step-7", 1, 3, {rows(6, 11)}, s.lookup());
  ASSERT_EQ(p.views[0].source, plan::View::Source::slices);
  const auto& c = p.views[0].copies;
  ASSERT_EQ(c.size(), 2u);
  const uint64_t row = 3 * 4;
  EXPECT_EQ(c[0].rank, 1u);
  EXPECT_EQ(c[0].rows, 1u);
  EXPECT_EQ(c[0].row_bytes, 2 * row);
  EXPECT_EQ(c[0].src_offset, 2 * row);  // row 6 is old rank 1's third row
  EXPECT_EQ(c[0].dst_offset, 0u);
  EXPECT_EQ(c[1].rank, 2u);
  EXPECT_EQ(c[1].row_bytes, 3 * row);
  EXPECT_EQ(c[1].src_offset, 0u);
  EXPECT_EQ(c[1].dst_offset, 2 * row);
  EXPECT_TRUE(p.resharded);
}

TEST(CheckpointPlan, ASplitAlongTheSecondDimensionCopiesStridedRows) {
  Saved s;
  s.m.world = 2;
  GlobalTensor g{"w", HAL_DTYPE_F32, Layout::split, 1, {4, 6}, {{0, 0, 3}, {1, 3, 3}}};
  s.m.tensors.push_back(g);
  for (uint32_t r = 0; r < 2; ++r) {
    format::Tensor t;
    t.name = "w";
    t.shape = {4, 3};
    t.bytes = 48;
    t.layout = Layout::split;
    t.split_dim = 1;
    t.split_offset = 3 * r;
    t.global_shape = {4, 6};
    s.records[{r, "w"}] = t;
  }
  // One rank now holds all 6 columns: each old piece gives 4 rows of 3 floats.
  const auto p =
      plan::make(s.m, "step-1", 0, 1, {split(TensorView("w", HAL_DTYPE_F32, {4, 6}, nullptr), 1, 0, {4, 6})},
                 s.lookup());
  const auto& c = p.views[0].copies;
  ASSERT_EQ(c.size(), 2u);
  EXPECT_EQ(c[1].rows, 4u);
  EXPECT_EQ(c[1].row_bytes, 12u);
  EXPECT_EQ(c[1].src_stride, 12u);
  EXPECT_EQ(c[1].dst_stride, 24u);
  EXPECT_EQ(c[1].dst_offset, 12u);
}

TEST(CheckpointPlan, AReplicatedTensorOnMoreRanksComesWholeFromTheSameNumberModuloTheOldWorld) {
  Saved s;
  s.m.world = 2;
  s.m.tensors.push_back({"b", HAL_DTYPE_F32, Layout::replicated, 0, {5}, {{0, 0, 0}, {1, 0, 0}}});
  for (uint32_t r = 0; r < 2; ++r) {
    format::Tensor t;
    t.name = "b";
    t.shape = {5};
    t.bytes = 20;
    t.layout = Layout::replicated;
    t.global_shape = {5};
    s.records[{r, "b"}] = t;
  }
  const auto p =
      plan::make(s.m, "step-1", 3, 4, {replicated(TensorView("b", HAL_DTYPE_F32, {5}, nullptr))}, s.lookup());
  ASSERT_EQ(p.views[0].copies.size(), 1u);
  EXPECT_EQ(p.views[0].copies[0].rank, 1u);
  EXPECT_EQ(p.views[0].copies[0].row_bytes, 20u);
}

TEST(CheckpointPlan, WhatCannotBeReshardedIsRefusedSayingWhy) {
  Saved s;
  s.m.world = 2;
  s.m.tensors.push_back({"opt", HAL_DTYPE_F32, Layout::local, 0, {}, {{0, 0, 0}, {1, 0, 0}}});
  try {
    plan::make(s.m, "step-3", 2, 3, {TensorView("opt", HAL_DTYPE_F32, {8}, nullptr)}, s.lookup());
    FAIL() << "a local tensor with no same-numbered old rank was planned";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Code::invalid_argument);
    EXPECT_NE(std::string(e.what()).find("re-sharding needs it saved and viewed as replicated or split"),
              std::string::npos)
        << e.what();
  }
  const Saved r = split_rows(2, {0, 8, 16});
  EXPECT_THROW(
      plan::make(r.m, "step-3", 0, 1, {TensorView("w", HAL_DTYPE_F16, {16, 3}, nullptr)}, r.lookup()),
      Error);  // another dtype
  EXPECT_THROW(plan::make(r.m, "step-3", 0, 1, {TensorView("nope", HAL_DTYPE_F32, {1}, nullptr)}, r.lookup()),
               Error);
}

TEST(CheckpointPlan, AShardRecordThatContradictsTheManifestIsDataLoss) {
  Saved s = split_rows(2, {0, 8, 16});
  s.records[{1, "w"}].shape = {7, 3};  // the manifest says 8 rows
  try {
    plan::make(s.m, "step-9", 0, 1, {rows(0, 16)}, s.lookup());
    FAIL() << "a contradicting record was planned from";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Code::data_loss) << e.what();
  }
}

}  // namespace
}  // namespace sigma::checkpoint
