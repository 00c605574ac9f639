// The step's global manifest and restore on another world size: shards of
// 4 ranks (real files, one engine per rank) restored on 1, 2, 3, 4 and 8
// ranks, through deltas; incomplete steps, a damaged step manifest and a
// foreign shard refused; views that cannot be re-sharded; and the
// differential chain going on after a restart.
#include <sigma/checkpoint.hpp>

#include "state.hpp"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

namespace sigma::checkpoint {
namespace {

std::string fresh_dir(const std::string& name) {
  const std::string d = ::testing::TempDir() + "ckpt-reshard-" + name + "-" + std::to_string(::getpid());
  std::filesystem::remove_all(d);
  return d;
}

Options options(const std::string& dir, uint32_t rank, uint32_t world) {
  Options o = testing::test_options(dir);
  o.rank = rank;
  o.world = world;
  o.chunk_bytes = 4096;  // several chunks per slice
  return o;
}

// The global state at a step: W [40, 24] f32 split along rows, E [5, 48] u16
// split along columns, R [17] i64 replicated.
struct Global {
  static constexpr int64_t kRows = 40, kCols = 24, kEr = 5, kEc = 48, kR = 17;
  std::vector<float> w;
  std::vector<uint16_t> e;
  std::vector<int64_t> r;
  explicit Global(uint64_t step) : w(kRows * kCols), e(kEr * kEc), r(kR) {
    for (size_t i = 0; i < w.size(); ++i)
      w[i] = static_cast<float>(i) * 0.25f + (i % 7 == step % 7 ? 1.0f * step : 0.0f);
    for (size_t i = 0; i < e.size(); ++i) e[i] = static_cast<uint16_t>(i * 3 + step);
    for (size_t i = 0; i < r.size(); ++i) r[i] = static_cast<int64_t>(i) - static_cast<int64_t>(step);
  }
};

// [lo, hi) of n items for rank of world (the first n % world get one more).
std::pair<int64_t, int64_t> part(int64_t n, uint32_t rank, uint32_t world) {
  const int64_t q = n / world, rem = n % world;
  const int64_t lo = rank * q + std::min<int64_t>(rank, rem);
  return {lo, lo + q + (rank < rem ? 1 : 0)};
}

// One rank's tensors: its slices of W and E, R, and a local tensor.
struct RankState {
  std::vector<float> w;
  std::vector<uint16_t> e;
  std::vector<int64_t> r;
  std::vector<uint8_t> local;
  int64_t w0, w1, e0, e1;
  RankState(uint32_t rank, uint32_t world) {
    std::tie(w0, w1) = part(Global::kRows, rank, world);
    std::tie(e0, e1) = part(Global::kEc, rank, world);
    w.resize(static_cast<size_t>((w1 - w0) * Global::kCols));
    e.resize(static_cast<size_t>(Global::kEr * (e1 - e0)));
    r.resize(Global::kR);
    local.assign(8, static_cast<uint8_t>(rank));
  }
  void fill(const Global& g) {
    for (int64_t i = w0; i < w1; ++i)
      for (int64_t j = 0; j < Global::kCols; ++j)
        w[(i - w0) * Global::kCols + j] = g.w[i * Global::kCols + j];
    for (int64_t i = 0; i < Global::kEr; ++i)
      for (int64_t j = e0; j < e1; ++j) e[i * (e1 - e0) + (j - e0)] = g.e[i * Global::kEc + j];
    r = g.r;
  }
  std::vector<TensorView> views(bool with_local) {
    std::vector<TensorView> v = {
        split({"W", HAL_DTYPE_F32, {w1 - w0, Global::kCols}, w.data()}, 0, w0,
              {Global::kRows, Global::kCols}),
        split({"E", HAL_DTYPE_BF16, {Global::kEr, e1 - e0}, e.data()}, 1, e0, {Global::kEr, Global::kEc}),
        replicated({"R", HAL_DTYPE_I64, {Global::kR}, r.data()})};
    if (with_local) v.push_back({"local", HAL_DTYPE_U8, {8}, local.data()});
    return v;
  }
};

Metadata meta(uint64_t step, uint32_t rank) {
  Metadata m = testing::meta_for(step);
  m.data_position = 1000 * rank + step;
  return m;
}

// Saves `step` of Global on `world` ranks (one engine each, in rank order).
std::vector<SaveResult> save_step(const std::string& dir, uint64_t step, uint32_t world, uint32_t ranks) {
  std::vector<SaveResult> out;
  for (uint32_t r = 0; r < ranks; ++r) {
    Engine e(options(dir, r, world));
    RankState s(r, world);
    s.fill(Global(step));
    out.push_back(e.save(s.views(true), meta(step, r)));
  }
  return out;
}

TEST(CheckpointReshard, AStepOfFourRanksRestoresOnOneTwoThreeFourAndEightRanksExactly) {
  const std::string dir = fresh_dir("worlds");
  std::vector<SaveResult> first = save_step(dir, 10, 4, 4);
  // Only the save that completed the step wrote the global manifest.
  EXPECT_FALSE(first[0].step_complete);
  EXPECT_FALSE(first[2].step_complete);
  EXPECT_TRUE(first[3].step_complete);
  std::vector<SaveResult> second = save_step(dir, 11, 4, 4);  // deltas against step 10
  for (const auto& s : second) EXPECT_FALSE(s.base);
  EXPECT_TRUE(second[3].step_complete);

  const Global want(11);
  for (uint32_t world : {1u, 2u, 3u, 4u, 8u}) {
    for (uint32_t rank = 0; rank < world; ++rank) {
      Engine e(options(dir, rank, world));
      RankState got(rank, world), expect(rank, world);
      expect.fill(want);
      Metadata m;
      const RestoreResult rr = e.restore(got.views(world == 4), &m);
      EXPECT_EQ(rr.step, 11u);
      EXPECT_EQ(rr.saved_world, 4u);
      EXPECT_EQ(rr.resharded, world != 4) << world;
      EXPECT_EQ(got.w, expect.w) << "world " << world << " rank " << rank;
      EXPECT_EQ(got.e, expect.e) << "world " << world << " rank " << rank;
      EXPECT_EQ(got.r, expect.r) << "world " << world << " rank " << rank;
      if (world == 4) {
        EXPECT_EQ(got.local, expect.local);
      }
      // Metadata of the same old rank, or of rank 0.
      EXPECT_EQ(m.data_position, 1000 * (rank < 4 ? rank : 0) + 11) << world << " " << rank;
    }
  }
  // One rank may also take a split tensor whole, or slice a replicated one.
  Engine e(options(dir, 1, 2));
  std::vector<float> whole(Global::kRows * Global::kCols);
  std::vector<int64_t> half(9);
  const RestoreResult rr =
      e.restore({replicated({"W", HAL_DTYPE_F32, {Global::kRows, Global::kCols}, whole.data()}),
                 split({"R", HAL_DTYPE_I64, {9}, half.data()}, 0, 8, {Global::kR})},
                nullptr);
  EXPECT_TRUE(rr.resharded);
  EXPECT_EQ(whole, want.w);
  EXPECT_EQ(half, std::vector<int64_t>(want.r.begin() + 8, want.r.end()));

  const std::vector<StepInfo> steps = list_steps(dir + "/job");
  ASSERT_EQ(steps.size(), 2u);
  EXPECT_TRUE(steps[0].complete);
  EXPECT_EQ(steps[0].world, 4u);
  EXPECT_EQ(steps[0].ranks, (std::vector<uint32_t>{0, 1, 2, 3}));
  verify_step(steps[0].path);
}

TEST(CheckpointReshard, IncompleteStepsDamagedStepManifestsAndForeignShardsAreNotRestored) {
  const std::string dir = fresh_dir("damage");
  save_step(dir, 5, 4, 4);
  save_step(dir, 10, 4, 4);
  save_step(dir, 20, 4, 3);  // rank 3 never committed step 20
  auto restore_on_two = [&](uint64_t newest = UINT64_MAX) {
    Engine e(options(dir, 0, 2));
    RankState got(0, 2), expect(0, 2);
    RestoreResult rr = e.restore(got.views(false), nullptr, newest);
    expect.fill(Global(rr.step));
    EXPECT_EQ(got.w, expect.w);
    return rr;
  };
  // Step 20 has no global manifest: another world size cannot use it.
  EXPECT_EQ(restore_on_two().step, 10u);
  std::vector<StepInfo> steps = list_steps(dir + "/job");
  EXPECT_FALSE(steps[0].complete);
  EXPECT_NE(steps[0].problem.find("no global manifest: 3 shard(s)"), std::string::npos) << steps[0].problem;
  EXPECT_THROW(verify_step(steps[0].path), Error);

  // A flipped byte in step 10's global manifest: refused, named, step 5 used.
  const std::string g10 = steps[1].path + "/global.sgcs";
  {
    std::fstream f(g10, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(4);
    f.put('X');  // the identifier
  }
  RestoreResult rr = restore_on_two();
  EXPECT_EQ(rr.step, 5u);
  ASSERT_EQ(rr.refused.size(), 1u);
  EXPECT_NE(rr.refused[0].find("global.sgcs"), std::string::npos) << rr.refused[0];
  // finalize_step rewrites it from the shards.
  EXPECT_TRUE(finalize_step(dir + "/job", 10));
  EXPECT_EQ(restore_on_two().step, 10u);

  // Rank 1's shard of step 10 swapped for one of another save of step 10
  // (another job's): the step manifest's record of it no longer matches.
  const std::string other = fresh_dir("damage-other");
  {
    Engine e(options(other, 1, 4));
    RankState s(1, 4);
    s.fill(Global(99));
    e.save(s.views(true), meta(10, 1));
  }
  const std::string shard1 = steps[1].path + "/rank-00001";
  std::filesystem::remove_all(shard1);
  std::filesystem::copy(other + "/job/step-00000000000000000010/rank-00001", shard1);
  rr = restore_on_two();
  EXPECT_EQ(rr.step, 5u);
  ASSERT_EQ(rr.refused.size(), 1u);
  EXPECT_NE(rr.refused[0].find("not the shard the step manifest"), std::string::npos) << rr.refused[0];
  EXPECT_THROW(verify_step(steps[1].path), Error);
}

TEST(CheckpointReshard, ViewsThatCannotBeReshardedAreTheCallersMistake) {
  const std::string dir = fresh_dir("views");
  save_step(dir, 3, 4, 4);
  {
    // A local tensor on another world size: from the old rank with the
    // same number (saying so)...
    std::vector<std::string> said;
    Options o = options(dir, 1, 2);
    o.log = [&](const std::string& x) { said.push_back(x); };
    Engine e1(o);
    RankState s1(1, 2);
    e1.restore(s1.views(true), nullptr);
    EXPECT_EQ(s1.local, std::vector<uint8_t>(8, 1));
    ASSERT_FALSE(said.empty());
    EXPECT_NE(said.back().find("from old rank 1's shard"), std::string::npos) << said.back();
    // ...and refused for a rank the old world did not have.
    Engine e5(options(dir, 5, 8));
    RankState s5(5, 8);
    try {
      e5.restore(s5.views(true), nullptr);
      FAIL();
    } catch (const Error& err) {
      EXPECT_EQ(err.code(), Code::invalid_argument);
      EXPECT_NE(std::string(err.what()).find("local to each rank"), std::string::npos) << err.what();
    }
  }
  Engine e(options(dir, 0, 2));
  std::vector<float> cols(Global::kRows * 12);
  try {  // W was split along rows; a view split along columns
    e.restore(
        {split({"W", HAL_DTYPE_F32, {Global::kRows, 12}, cols.data()}, 1, 0, {Global::kRows, Global::kCols})},
        nullptr);
    FAIL();
  } catch (const Error& err) {
    EXPECT_EQ(err.code(), Code::invalid_argument);
    EXPECT_NE(std::string(err.what()).find("another dimension"), std::string::npos) << err.what();
  }
  std::vector<float> wrong(41 * Global::kCols);
  EXPECT_THROW(e.restore({replicated({"W", HAL_DTYPE_F32, {41, Global::kCols}, wrong.data()})}, nullptr),
               Error);
  // Bad layouts are refused before anything is read or written.
  EXPECT_THROW(e.save({split({"W", HAL_DTYPE_F32, {10, 24}, wrong.data()}, 0, 35, {40, 24})}, meta(4, 0)),
               Error);
  EXPECT_THROW(e.save({split({"W", HAL_DTYPE_F32, {10, 24}, wrong.data()}, 1, 0, {40, 24})}, meta(4, 0)),
               Error);
}

TEST(CheckpointReshard, ShardsThatDisagreeLeaveTheStepIncompleteAndSaySo) {
  const std::string dir = fresh_dir("disagree");
  std::vector<std::string> said;
  std::vector<float> a(10 * 24), b(12 * 24);
  {
    Options o = options(dir, 0, 2);
    Engine e(o);
    e.save({split({"W", HAL_DTYPE_F32, {10, 24}, a.data()}, 0, 0, {20, 24})}, meta(1, 0));
  }
  Options o = options(dir, 1, 2);
  o.log = [&](const std::string& s) { said.push_back(s); };
  Engine e(o);
  // Rank 1's slice overlaps rank 0's: [8, 20) against [0, 10).
  const SaveResult r = e.save({split({"W", HAL_DTYPE_F32, {12, 24}, b.data()}, 0, 8, {20, 24})}, meta(1, 1));
  EXPECT_FALSE(r.step_complete);
  ASSERT_FALSE(said.empty());
  EXPECT_NE(said.back().find("does not continue at 10"), std::string::npos) << said.back();
  EXPECT_FALSE(list_steps(dir + "/job")[0].complete);
}

TEST(CheckpointReshard, AfterARestartDeltasContinueAgainstTheBaseOnDisk) {
  const std::string dir = fresh_dir("restart");
  std::vector<bool> bases;
  {
    Engine e(testing::test_options(dir));  // a base every 4
    bases.push_back(e.save(testing::State(1).views(), testing::meta_for(1)).base);
    bases.push_back(e.save(testing::State(2).views(), testing::meta_for(2)).base);
  }
  std::vector<std::string> said;
  Options o = testing::test_options(dir);
  o.log = [&](const std::string& s) { said.push_back(s); };
  Engine e(o);  // a new process, as after a restart
  for (uint64_t step = 3; step <= 6; ++step) {
    const SaveResult r = e.save(testing::State(step).views(), testing::meta_for(step));
    bases.push_back(r.base);
    if (step == 3) {
      EXPECT_LT(r.stored_bytes, r.raw_bytes / 4);
    }
  }
  // The same chain as one engine would have made: a base every 4.
  EXPECT_EQ(bases, (std::vector<bool>{true, false, false, false, true, false}));
  ASSERT_FALSE(said.empty());
  EXPECT_NE(said.front().find("against the base of step 1 (reloaded from disk)"), std::string::npos)
      << said.front();
  testing::State back(0);
  EXPECT_EQ(e.restore(back.views(), nullptr, 4).step, 4u);
  EXPECT_TRUE(back == testing::State(4));
  EXPECT_EQ(inspect(dir + "/job/step-00000000000000000004/rank-00000").base_step, 1);
}

}  // namespace
}  // namespace sigma::checkpoint
