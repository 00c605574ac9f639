// The checkpoint engine in one process: round trips of bases and deltas,
// unchanged chunks skipped, retention, asynchronous saves with
// back-pressure, and every kind of damage refused with a fallback.
#include <sigma/checkpoint.hpp>

#include "state.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>

namespace sigma::checkpoint {
namespace {

using testing::meta_for;
using testing::State;

std::string fresh_dir(const std::string& name) {
  const std::string d = ::testing::TempDir() + "ckpt-" + name + "-" + std::to_string(::getpid());
  std::filesystem::remove_all(d);
  return d;
}

Options options(const std::string& dir) { return testing::test_options(dir); }

void flip_byte(const std::string& path, uint64_t offset) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(static_cast<std::streamoff>(offset));
  char c;
  f.get(c);
  f.seekp(static_cast<std::streamoff>(offset));
  f.put(static_cast<char>(c ^ 0x10));
}

TEST(Checkpoint, ABaseRoundTripsEveryTensorAndTheMetadata) {
  Engine e(options(fresh_dir("base")));
  State s(7);
  const SaveResult r = e.save(s.views(), meta_for(7));
  EXPECT_TRUE(r.base);
  EXPECT_EQ(r.step, 7u);
  EXPECT_GT(r.raw_bytes, 1'000'000u);
  EXPECT_LT(r.stored_bytes, r.raw_bytes);  // shuffle + zstd compress these values
  State back(0);
  Metadata m;
  const RestoreResult rr = e.restore(back.views(), &m);
  EXPECT_EQ(rr.step, 7u);
  EXPECT_TRUE(rr.refused.empty());
  EXPECT_TRUE(back == s);
  EXPECT_EQ(m.data_position, 7u * 32);
  EXPECT_EQ(m.rng_state, meta_for(7).rng_state);
  EXPECT_EQ(m.loss_scale, meta_for(7).loss_scale);
  EXPECT_EQ(m.guardrails_state, meta_for(7).guardrails_state);
  EXPECT_EQ(m.parallel_plan, meta_for(7).parallel_plan);
  EXPECT_EQ(m.extra, meta_for(7).extra);
  verify(r.path);
}

TEST(Checkpoint, DeltasSkipUnchangedChunksAndRestoreExactly) {
  Engine e(options(fresh_dir("delta")));
  State s1(1);
  ASSERT_TRUE(e.save(s1.views(), meta_for(1)).base);
  State s2(2);  // a few weights moved; most chunks did not
  const SaveResult d = e.save(s2.views(), meta_for(2));
  EXPECT_FALSE(d.base);
  EXPECT_GT(d.chunks_unchanged, 0u);
  EXPECT_LT(d.stored_bytes, d.raw_bytes / 4);
  State back(0);
  EXPECT_EQ(e.restore(back.views(), nullptr).step, 2u);
  EXPECT_TRUE(back == s2);
  verify(d.path);
  const ShardInfo info = inspect(d.path);
  EXPECT_EQ(info.base_step, 1);
  EXPECT_EQ(info.tensors.size(), 5u);
  // Every base_every-th checkpoint is a base again.
  EXPECT_FALSE(e.save(State(3).views(), meta_for(3)).base);
  EXPECT_FALSE(e.save(State(4).views(), meta_for(4)).base);
  EXPECT_TRUE(e.save(State(5).views(), meta_for(5)).base);
  // A tensor that changes size forces a base.
  EXPECT_FALSE(e.save(State(6).views(), meta_for(6)).base);
  State bigger(7, 2);
  EXPECT_TRUE(e.save(bigger.views(), meta_for(7)).base);
}

// A scalar (shape {}: an optimizer's step counter) has an empty shape
// vector, which FlatBuffers need not align; bases and deltas both read.
TEST(Checkpoint, ScalarTensorsRoundTripInBasesAndDeltas) {
  Engine e(options(fresh_dir("scalar")));
  float step_count = 1;
  std::vector<float> w(1000, 0.5f);
  const auto views = [&] {
    return std::vector<TensorView>{TensorView("w", HAL_DTYPE_F32, {1000}, w.data()),
                                   TensorView("step", HAL_DTYPE_F32, {}, &step_count)};
  };
  for (int i = 0; i < 3; ++i) {
    step_count += 1;
    w[static_cast<size_t>(i)] += 1;
    verify(e.save(views(), meta_for(static_cast<uint64_t>(i) + 1)).path);
  }
  step_count = 0;
  w.assign(1000, 0);
  const RestoreResult r = e.restore(views(), nullptr);
  EXPECT_EQ(r.step, 3u);
  EXPECT_TRUE(r.refused.empty()) << r.refused.front();
  EXPECT_EQ(step_count, 4.0f);
  EXPECT_EQ(w[2], 1.5f);
}

// diff_tensor walks two shards chunk by chunk side by side, whatever their
// chunk sizes: the counts and figures are those of the whole tensors.
TEST(Checkpoint, DiffComparesTensorsChunkedDifferentlyElementByElement) {
  std::vector<float> a(10000);
  for (size_t i = 0; i < a.size(); ++i) a[i] = static_cast<float>(i) * 0.25f;
  std::vector<float> b = a;
  b[0] += 1.0f;     // first element
  b[1023] -= 3.0f;  // the last of a's first 4 KiB chunk
  b[9999] += 0.5f;  // last element
  Options oa = options(fresh_dir("diff-a")), ob = options(fresh_dir("diff-b"));
  oa.chunk_bytes = 4096;
  ob.chunk_bytes = 12288;
  const std::string pa =
      Engine(oa).save({TensorView("w", HAL_DTYPE_F32, {10000}, a.data())}, meta_for(1)).path;
  const std::string pb =
      Engine(ob).save({TensorView("w", HAL_DTYPE_F32, {10000}, b.data())}, meta_for(1)).path;
  const TensorDiff d = diff_tensor(pa, pb, "w");
  EXPECT_EQ(d.elements, 10000u);
  EXPECT_EQ(d.changed, 3u);
  EXPECT_DOUBLE_EQ(d.max_abs, 3.0);
  EXPECT_DOUBLE_EQ(d.rms, std::sqrt((1.0 + 9.0 + 0.25) / 10000));
  EXPECT_EQ(diff_tensor(pa, pa, "w").changed, 0u);
  EXPECT_THROW(diff_tensor(pa, pb, "missing"), Error);
}

TEST(Checkpoint, RetentionKeepsTheBasesKeptDeltasNeed) {
  Options o = options(fresh_dir("gc"));
  o.keep = 2;
  o.base_every = 10;
  Engine e(o);
  for (uint64_t step = 1; step <= 6; ++step) e.save(State(step).views(), meta_for(step));
  std::vector<uint64_t> steps;
  for (const auto& s : e.list()) steps.push_back(s.step);
  EXPECT_EQ(steps, (std::vector<uint64_t>{6, 5, 1}));  // 1 is their base
  State back(0);
  EXPECT_EQ(e.restore(back.views(), nullptr).step, 6u);
  EXPECT_TRUE(back == State(6));
}

TEST(Checkpoint, AsyncSavesBlockOnlyForTheCopyAndPushBackWhenBehind) {
  Options o = options(fresh_dir("async"));
  std::vector<std::string> said;
  o.log = [&](const std::string& s) { said.push_back(s); };
  // A save that finds an earlier one still pending waits for it. Whether
  // the writer is still at the previous save when the next comes is the
  // scheduler's: saves come back to back until one has waited (the
  // writer's persist, with its fsync, takes far longer than the caller's
  // gap between two saves, so it is the second save nearly always).
  o.max_pending_bytes = 1;
  Engine e(o);
  uint64_t saves = 0;
  while (said.empty() && saves < 32) {
    const uint64_t step = ++saves;
    State s(step);
    const SaveResult r = e.save_async(s.views(), meta_for(step));
    EXPECT_GE(r.blocked_s, r.backpressure_s);
    // The caller may change its tensors at once: the engine has a copy.
    s.w1.assign(s.w1.size(), -1.0f);
  }
  const auto results = e.wait();
  ASSERT_EQ(results.size(), saves);
  ASSERT_FALSE(said.empty()) << "no save waited in " << saves << " back to back";
  EXPECT_NE(said[0].find("back-pressure"), std::string::npos) << said[0];
  State back(0);
  EXPECT_EQ(e.restore(back.views(), nullptr).step, saves);
  EXPECT_TRUE(back == State(saves));
}

// reserve() only readies staging memory: saves that come before or after
// it round-trip, and memory reserved for other sizes is harmless.
TEST(Checkpoint, SavesAroundAReservationRoundTrip) {
  Engine e(options(fresh_dir("reserve")));
  State s(1);
  e.reserve(s.views());
  e.save_async(s.views(), meta_for(1));  // may come before the writer readied anything
  std::vector<float> other(1000, 2.0f);
  e.reserve({{"other", HAL_DTYPE_F32, {static_cast<int64_t>(other.size())}, other.data()}});
  for (uint64_t step = 2; step <= 4; ++step) {
    State t(step);
    e.save_async(t.views(), meta_for(step));
  }
  ASSERT_EQ(e.wait().size(), 4u);
  State back(0);
  EXPECT_EQ(e.restore(back.views(), nullptr).step, 4u);
  EXPECT_TRUE(back == State(4));
}

// poll() never waits: it hands over each durable save once, and a save
// it has not handed over yet comes with the next wait().
TEST(Checkpoint, PollHandsOverEachDurableSaveOnceWithoutWaiting) {
  Engine e(options(fresh_dir("poll")));
  EXPECT_TRUE(e.poll().empty());
  std::vector<uint64_t> seen;
  for (uint64_t step = 1; step <= 4; ++step) {
    State s(step);
    e.save_async(s.views(), meta_for(step));
    for (const auto& r : e.poll()) seen.push_back(r.step);
  }
  for (const auto& r : e.wait()) seen.push_back(r.step);
  EXPECT_EQ(seen, (std::vector<uint64_t>{1, 2, 3, 4})) << "each save once, in order";
  EXPECT_TRUE(e.poll().empty());
}

// After a rollback the checkpoints of later steps go, and the steps run
// again are saved anew: a chain restarted from a full base where needed.
TEST(Checkpoint, CheckpointsAfterARollbackAreDiscardedAndSavedAgain) {
  Options o = options(fresh_dir("discard"));
  o.base_every = 2;
  o.keep = 10;
  Engine e(o);
  for (uint64_t step = 1; step <= 5; ++step) e.save(State(step).views(), meta_for(step));
  e.discard_after(2);
  State back(0);
  EXPECT_EQ(e.restore(back.views(), nullptr).step, 2u);
  // Step 3 again, with other contents (the re-run after a rollback differs).
  const SaveResult r = e.save(State(33).views(), meta_for(3));
  EXPECT_EQ(r.step, 3u);
  EXPECT_EQ(e.restore(back.views(), nullptr).step, 3u);
  EXPECT_TRUE(back == State(33));
}

TEST(Checkpoint, AnOverlappedSnapshotCopiesWhileTheCallerReadsAndHoldsTheStateOfItsCall) {
  Options o = options(fresh_dir("overlap"));
  Engine e(o);
  State s(1);
  for (uint64_t step = 1; step <= 6; ++step) {
    const SaveResult r = e.save_async(s.views(), meta_for(step), Engine::Snapshot::overlapped);
    EXPECT_EQ(r.step, step);
    // "The forward and backward pass": reading the tensors is allowed.
    double sum = 0;
    for (float x : s.w1) sum += x;
    EXPECT_TRUE(std::isfinite(sum));
    EXPECT_GE(e.wait_snapshot(), 0.0);
    // "The optimiser step": only now may the tensors change.
    s = State(step + 1);
    if (step == 3) {
      // Without wait_snapshot, every other call waits for the copy itself.
      e.save_async(s.views(), meta_for(100), Engine::Snapshot::overlapped);
      EXPECT_EQ(e.wait().size(), 4u);
      EXPECT_EQ(e.restore(State(0).views(), nullptr).step, 100u);
    }
  }
  EXPECT_GE(e.wait_snapshot(), 0.0);  // nothing running: returns at once
  e.wait();
  for (uint64_t step : {2u, 5u}) {
    State back(0);
    EXPECT_EQ(e.restore(back.views(), nullptr, step).step, step);
    EXPECT_TRUE(back == State(step)) << step;
  }
}

TEST(Checkpoint, TheLayoutIsReadThroughTheLibraryNotByHand) {
  const std::string dir = fresh_dir("layout");
  Options o = options(dir);
  for (uint32_t rank : {1u, 0u}) {
    o.rank = rank;
    o.world = 2;
    Engine e(o);
    e.save(State(rank).views(), meta_for(7));
  }
  const std::string job = dir + "/" + o.job;
  const std::string step = job + "/step-00000000000000000007";
  EXPECT_EQ(classify(dir), PathKind::other);
  EXPECT_EQ(classify(job), PathKind::job);
  EXPECT_EQ(classify(step), PathKind::step);
  EXPECT_EQ(classify(step + "/rank-00001"), PathKind::shard);
  EXPECT_EQ(list_jobs(dir), std::vector<std::string>{job});
  EXPECT_EQ(list_jobs(job), std::vector<std::string>{job});
  EXPECT_EQ(list_step_shards(step), (std::vector<std::string>{step + "/rank-00000", step + "/rank-00001"}));
  const auto steps = list_steps(job);
  ASSERT_EQ(steps.size(), 1u);
  EXPECT_TRUE(steps[0].complete) << steps[0].problem;
  EXPECT_EQ(steps[0].ranks, (std::vector<uint32_t>{0, 1}));
  EXPECT_TRUE(list_steps(dir + "/no-such-job").empty());
  EXPECT_TRUE(list_jobs(dir + "/no-such-folder").empty());
}

TEST(Checkpoint, WithoutDirectIoTheDataIsWrittenBufferedAndRoundTrips) {
  // Buffered writes with streaming writeback: the path taken where the file
  // system refuses O_DIRECT, forced here (tmpfs and most disks take it).
  const std::string dir = fresh_dir("buffered");
  Options o = options(dir);
  o.direct_io = false;
  Engine e(o);
  State big(1, 60);  // ~72 MiB raw, ~40 MiB stored: past one 32 MiB writeback window
  const SaveResult r = e.save(big.views(), meta_for(1));
  EXPECT_GT(r.stored_bytes, uint64_t{32} << 20);
  verify(r.path);
  State back(0, 60);
  EXPECT_EQ(e.restore(back.views(), nullptr).step, 1u);
  EXPECT_TRUE(back == big);
}

TEST(Checkpoint, DamageAnywhereIsRefusedNamingTheCheckAndRestoreFallsBack) {
  const std::string dir = fresh_dir("damage");
  Options o = options(dir);
  std::vector<std::string> said;
  o.log = [&](const std::string& s) { said.push_back(s); };
  Engine e(o);
  e.save(State(1).views(), meta_for(1));
  const SaveResult r2 = e.save(State(2).views(), meta_for(2));
  const SaveResult r3 = e.save(State(3).views(), meta_for(3));
  // A flipped bit in the newest's data: the stored hash catches it.
  const std::string data3 = r3.path + "/data.bin";
  flip_byte(data3, std::filesystem::file_size(data3) / 2);
  try {
    verify(r3.path);
    FAIL();
  } catch (const Error& x) {
    EXPECT_EQ(x.code(), Code::data_loss);
    EXPECT_NE(std::string(x.what()).find("data.bin: tensor"), std::string::npos) << x.what();
    EXPECT_NE(std::string(x.what()).find("chunk"), std::string::npos) << x.what();
  }
  // A torn manifest in the next one.
  const std::string man2 = r2.path + "/manifest.sgck";
  std::filesystem::resize_file(man2, std::filesystem::file_size(man2) / 2);
  State back(0);
  const RestoreResult rr = e.restore(back.views(), nullptr);
  EXPECT_EQ(rr.step, 1u);
  EXPECT_TRUE(back == State(1));
  ASSERT_EQ(rr.refused.size(), 2u);
  EXPECT_NE(rr.refused[0].find(r3.path), std::string::npos) << rr.refused[0];
  EXPECT_NE(rr.refused[1].find("manifest.sgck"), std::string::npos) << rr.refused[1];
  EXPECT_EQ(said.size(), 2u);
}

TEST(Checkpoint, TruncatedDataVersionMismatchAndNoGoodCheckpointAreSaid) {
  const std::string dir = fresh_dir("trunc");
  Engine e(options(dir));
  const SaveResult r = e.save(State(1).views(), meta_for(1));
  std::filesystem::resize_file(r.path + "/data.bin", 100);
  try {
    verify(r.path);
    FAIL();
  } catch (const Error& x) {
    EXPECT_NE(std::string(x.what()).find("truncated"), std::string::npos) << x.what();
  }
  // The manifest's format version is its first field after the header:
  // rewrite the manifest of a second save with another version.
  Options o2 = options(dir);
  o2.job = "other";
  Engine e2(o2);
  const SaveResult r2 = e2.save(State(2).views(), meta_for(2));
  std::ifstream in(r2.path + "/manifest.sgck", std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  in.close();
  const std::string two("\x02\x00\x00\x00", 4), nine("\x09\x00\x00\x00", 4);
  const auto at = bytes.find(two);
  ASSERT_NE(at, std::string::npos);
  bytes.replace(at, 4, nine);
  std::ofstream(r2.path + "/manifest.sgck", std::ios::binary | std::ios::trunc) << bytes;
  try {
    inspect(r2.path);
    FAIL();
  } catch (const Error& x) {
    EXPECT_NE(std::string(x.what()).find("format version 9"), std::string::npos) << x.what();
  }
  State back(0);
  try {
    e.restore(back.views(), nullptr);
    FAIL();
  } catch (const Error& x) {
    EXPECT_EQ(x.code(), Code::data_loss);
    EXPECT_NE(std::string(x.what()).find("no good checkpoint"), std::string::npos);
  }
  // Every stored byte is checked before the first decoded one lands: the
  // caller's tensors are as they were.
  EXPECT_TRUE(back == State(0));
}

TEST(Checkpoint, ViewsThatDoNotMatchAreTheCallersMistakeNotDamage) {
  Engine e(options(fresh_dir("mismatch")));
  e.save(State(1).views(), meta_for(1));
  State back(0, 2);  // w1 twice as large
  try {
    e.restore(back.views(), nullptr);
    FAIL();
  } catch (const Error& x) {
    EXPECT_EQ(x.code(), Code::invalid_argument);
    EXPECT_NE(std::string(x.what()).find("layers.0.weight"), std::string::npos) << x.what();
  }
  auto v = State(1).views();
  v[1].name = v[0].name;
  EXPECT_THROW(e.save(v, meta_for(2)), Error);
  EXPECT_THROW(e.save(State(1).views(), meta_for(1)), Error);  // step 1 exists
  Options bad = options(fresh_dir("bad"));
  bad.job = "../escape";
  EXPECT_THROW(Engine{bad}, Error);
  bad = options(fresh_dir("bad"));
  bad.chunk_bytes = 10;
  EXPECT_THROW(Engine{bad}, Error);
}

}  // namespace
}  // namespace sigma::checkpoint
