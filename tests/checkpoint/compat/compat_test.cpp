// Old checkpoints stay readable: the checkpoints committed under
// compat/format-vN/ were written by the engine of format version N (by
// checkpoint_fixture_writer, from compat_state.hpp) and every later build
// must restore them bit for bit, on the world size they were saved with and
// re-sharded onto another. A fixture is never rewritten: a new format
// version adds its own folder beside the old ones.
#include <sigma/checkpoint.hpp>

#include "compat_state.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

namespace sigma::checkpoint::compat {
namespace {

namespace fs = std::filesystem;

// A scratch copy of a committed fixture: an engine may tidy its folder, and
// the source tree is not the test's to change.
std::string copy_of(const std::string& version) {
  const std::string from = std::string(SIGMA_CHECKPOINT_COMPAT_DIR) + "/" + version;
  const std::string to = ::testing::TempDir() + "ckpt-compat-" + version + "-" + std::to_string(::getpid());
  fs::remove_all(to);
  fs::copy(from, to, fs::copy_options::recursive);
  return to;
}

void expect_meta(const Metadata& m, uint64_t step, uint32_t rank) {
  const Metadata want = compat_meta(step, rank);
  EXPECT_EQ(m.step, want.step);
  EXPECT_EQ(m.data_position, want.data_position);
  EXPECT_EQ(m.rng_state, want.rng_state);
  EXPECT_EQ(m.loss_scale, want.loss_scale);
  EXPECT_EQ(m.guardrails_state, want.guardrails_state);
  EXPECT_EQ(m.parallel_plan, want.parallel_plan);
  EXPECT_EQ(m.extra, want.extra);
}

class OldFormat : public ::testing::TestWithParam<std::string> {};

TEST_P(OldFormat, EveryRankRestoresTheDeltaAndTheBaseBitForBit) {
  const std::string dir = copy_of(GetParam());
  for (uint64_t step : {2u, 1u})
    for (uint32_t rank = 0; rank < kWorld; ++rank) {
      Engine e(compat_options(dir, rank, kWorld));
      CompatState back(99, 7);  // other values everywhere
      Metadata meta;
      const RestoreResult r = e.restore(back.views(rank), &meta, step);
      EXPECT_EQ(r.step, step) << "rank " << rank;
      EXPECT_TRUE(r.refused.empty()) << r.refused.front();
      EXPECT_FALSE(r.resharded);
      const CompatState want(step, rank);
      EXPECT_EQ(back.slice, want.slice) << "step " << step << " rank " << rank;
      EXPECT_EQ(back.embed, want.embed) << "step " << step << " rank " << rank;
      EXPECT_EQ(back.counts, want.counts) << "step " << step << " rank " << rank;
      expect_meta(meta, step, rank);
    }
  fs::remove_all(dir);
}

TEST_P(OldFormat, OneRankRestoresTheWholeStateReShardedFromBoth) {
  const std::string dir = copy_of(GetParam());
  Engine e(compat_options(dir, 0, 1));
  std::vector<float> whole(static_cast<size_t>(kRows * kWorld * kCols));
  CompatState back(99, 7);
  std::vector<TensorView> views = back.views(0);
  views[0] = replicated({"expert.w", HAL_DTYPE_F32, {kRows * kWorld, kCols}, whole.data()});
  Metadata meta;
  const RestoreResult r = e.restore(views, &meta);
  EXPECT_EQ(r.step, 2u);
  EXPECT_TRUE(r.resharded);
  EXPECT_EQ(r.saved_world, kWorld);
  std::vector<float> want;
  for (uint32_t rank = 0; rank < kWorld; ++rank) {
    const CompatState s(2, rank);
    want.insert(want.end(), s.slice.begin(), s.slice.end());
  }
  EXPECT_EQ(whole, want);
  EXPECT_EQ(back.embed, CompatState(2, 0).embed);
  EXPECT_EQ(back.counts, CompatState(2, 0).counts);  // local: from old rank 0
  expect_meta(meta, 2, 0);
  fs::remove_all(dir);
}

TEST_P(OldFormat, EveryShardAndStepVerifies) {
  const std::string dir = copy_of(GetParam());
  const std::vector<StepInfo> steps = list_steps(dir + "/compat");
  ASSERT_EQ(steps.size(), 2u);
  for (const StepInfo& s : steps) {
    EXPECT_TRUE(s.complete) << s.path << ": " << s.problem;
    EXPECT_NO_THROW(verify_step(s.path, true)) << s.path;
  }
  const std::vector<ShardInfo> shards = list_shards(dir + "/compat");
  ASSERT_EQ(shards.size(), 4u);
  for (const ShardInfo& s : shards) EXPECT_EQ(s.base_step, s.step == 1 ? -1 : 1) << s.path;
  fs::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(Committed, OldFormat, ::testing::Values("format-v1"), [](const auto& info) {
  std::string n = info.param;
  for (char& c : n)
    if (c == '-') c = '_';
  return n;
});

}  // namespace
}  // namespace sigma::checkpoint::compat
