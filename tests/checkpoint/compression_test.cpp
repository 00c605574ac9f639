// Raw chunks and the automatic compression choice through the engine: what
// a raw checkpoint stores, that it restores bit for bit (bases, deltas,
// re-sharded), that damage in it or between its chunks is refused, and
// that the automatic mode follows the device's rates (stated here: the
// choice is then the test's, not this machine's).
#include <sigma/checkpoint.hpp>

#include "state.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

namespace sigma::checkpoint {
namespace {

using testing::meta_for;
using testing::State;

std::string fresh_dir(const std::string& name) {
  const std::string d = ::testing::TempDir() + "ckpt-codec-" + name + "-" + std::to_string(::getpid());
  std::filesystem::remove_all(d);
  return d;
}

void poke(const std::string& path, uint64_t offset, char byte) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekp(static_cast<std::streamoff>(offset));
  f.put(byte);
}

uint64_t count(const ShardInfo& s, uint64_t ShardInfo::Tensor::*field) {
  uint64_t n = 0;
  for (const auto& t : s.tensors) n += t.*field;
  return n;
}

TEST(RawChunks, BasesAndDeltasRestoreBitForBitAndUnchangedChunksStillStoreNothing) {
  Engine e(testing::test_options(fresh_dir("raw"), Compression::never));
  for (uint64_t step = 1; step <= 6; ++step) {
    const SaveResult r = e.save(State(step).views(), meta_for(step));
    const ShardInfo info = inspect(r.path);
    EXPECT_EQ(info.format_version, 2u);
    EXPECT_EQ(info.compression, Compression::never);
    EXPECT_EQ(count(info, &ShardInfo::Tensor::chunks_compressed), 0u);
    EXPECT_EQ(count(info, &ShardInfo::Tensor::chunks_raw) + count(info, &ShardInfo::Tensor::chunks_unchanged),
              count(info, &ShardInfo::Tensor::chunks));
    if (r.base) {
      EXPECT_GE(r.stored_bytes, r.raw_bytes);  // raw, padded to 4 KiB boundaries
    } else {
      EXPECT_GT(r.chunks_unchanged, 0u) << step;
    }
  }
  for (uint64_t step = 6; step >= 1; --step) {
    State back(0);
    Metadata meta;
    EXPECT_EQ(e.restore(back.views(), &meta, step).step, step);
    EXPECT_TRUE(back == State(step)) << step;
    EXPECT_EQ(meta.data_position, meta_for(step).data_position);
  }
}

TEST(RawChunks, ADeltaOfRawChunksOverACompressedBaseAndBackRestores) {
  // The mode may change between saves of one job (another machine, another
  // option): a delta's chunks take the new mode, its unchanged ones read
  // the base's, whatever its codec.
  const std::string dir = fresh_dir("mixed");
  {
    Engine e(testing::test_options(dir, Compression::always));
    e.save(State(1).views(), meta_for(1));
  }
  Engine e(testing::test_options(dir, Compression::never));
  e.save(State(2).views(), meta_for(2));
  const ShardInfo d = e.list().front();
  EXPECT_EQ(d.base_step, 1);
  EXPECT_GT(count(d, &ShardInfo::Tensor::chunks_raw), 0u);
  EXPECT_GT(count(d, &ShardInfo::Tensor::chunks_unchanged), 0u);
  State back(0);
  EXPECT_EQ(e.restore(back.views(), nullptr).step, 2u);
  EXPECT_TRUE(back == State(2));
  verify(d.path);
}

TEST(RawChunks, ARawCheckpointReShardsOntoAnotherWorldSize) {
  const std::string dir = fresh_dir("reshard");
  std::vector<float> whole(4096 * 3);
  for (size_t i = 0; i < whole.size(); ++i) whole[i] = static_cast<float>(i) * 0.25f;
  for (uint32_t rank = 0; rank < 2; ++rank) {
    Options o = testing::test_options(dir, Compression::never);
    o.rank = rank;
    o.world = 2;
    Engine e(o);
    e.save(
        {split({"w", HAL_DTYPE_F32, {2048, 3}, whole.data() + rank * 2048 * 3}, 0, rank * 2048, {4096, 3})},
        meta_for(1));
  }
  Options o = testing::test_options(dir, Compression::never);
  Engine e(o);
  std::vector<float> back(whole.size());
  const RestoreResult r = e.restore({replicated({"w", HAL_DTYPE_F32, {4096, 3}, back.data()})}, nullptr);
  EXPECT_TRUE(r.resharded);
  EXPECT_EQ(back, whole);
}

TEST(RawChunks, DamageInAChunkOrBetweenChunksIsRefusedAndRestoreFallsBack) {
  const std::string dir = fresh_dir("damage");
  Options o = testing::test_options(dir, Compression::never);
  o.base_every = 1;
  Engine e(o);
  e.save(State(1).views(), meta_for(1));
  const SaveResult r2 = e.save(State(2).views(), meta_for(2));
  const SaveResult r3 = e.save(State(3).views(), meta_for(3));
  // Inside the first chunk of step 3.
  poke(r3.path + "/data.bin", 100, '\x5a');
  try {
    verify(r3.path);
    FAIL() << "damage in a raw chunk was not seen";
  } catch (const Error& x) {
    EXPECT_EQ(x.code(), Code::data_loss);
    EXPECT_NE(std::string(x.what()).find("data.bin: tensor layers.0.weight chunk 0"), std::string::npos)
        << x.what();
  }
  // In step 2's padding after the first tensor (1.2 MB, whole 64 KiB chunks
  // but its last): between chunks, where no hash covers it.
  const uint64_t w1_bytes = 300000 * 4, pad_at = w1_bytes + 10;
  ASSERT_NE(pad_at % 4096, 0u);
  poke(r2.path + "/data.bin", pad_at, '\x01');
  try {
    verify(r2.path);
    FAIL() << "damage in the padding was not seen";
  } catch (const Error& x) {
    EXPECT_NE(std::string(x.what()).find("byte " + std::to_string(pad_at) + " lies between chunks"),
              std::string::npos)
        << x.what();
  }
  // Restore skips step 3 (its chunk's hash) and takes step 2 (its chunks
  // are whole: padding is never read into the state).
  State back(0);
  const RestoreResult rr = e.restore(back.views(), nullptr);
  EXPECT_EQ(rr.step, 2u);
  ASSERT_EQ(rr.refused.size(), 1u);
  EXPECT_NE(rr.refused[0].find("xxh3 of the stored bytes does not match"), std::string::npos)
      << rr.refused[0];
  EXPECT_TRUE(back == State(2));
}

TEST(AutomaticCompression, FollowsTheDeviceRatesAndRecordsThem) {
  for (const double rate : {10e6, 1e12}) {
    Options o = testing::test_options(fresh_dir(rate < 1e9 ? "slow" : "fast"), Compression::automatic);
    o.disk_read_bytes_per_s = o.disk_write_bytes_per_s = rate;
    Engine e(o);
    const SaveResult r = e.save(State(1).views(), meta_for(1));
    const ShardInfo info = inspect(r.path);
    EXPECT_EQ(info.compression, Compression::automatic);
    EXPECT_EQ(info.disk_read_bytes_per_s, rate);
    EXPECT_EQ(info.disk_write_bytes_per_s, rate);
    EXPECT_GE(info.threads, 1u);
    // Every chunk went the way its recorded figures say.
    for (const auto& t : info.tensors)
      for (const auto& c : t.chunk_list) {
        EXPECT_NE(c.why.find("; " + c.codec + ": "), std::string::npos) << c.why;
        EXPECT_NE(c.why.find("sampled ratio"), std::string::npos) << c.why;
      }
    if (rate < 1e9) {
      // At 10 MB/s the large tensor's 64 KiB chunks are compressed on any
      // CPU (a tiny chunk's codec time can lose to a slow one, e.g. under
      // a sanitizer, and is then rightly raw).
      const ShardInfo::Tensor& w1 = info.tensors.at(0);
      ASSERT_EQ(w1.name, "layers.0.weight");
      EXPECT_EQ(w1.chunks_compressed, w1.chunks);
      EXPECT_LT(r.stored_bytes, r.raw_bytes);
    } else {
      EXPECT_EQ(count(info, &ShardInfo::Tensor::chunks_raw), count(info, &ShardInfo::Tensor::chunks));
    }
    State back(0);
    EXPECT_EQ(e.restore(back.views(), nullptr).step, 1u);
    EXPECT_TRUE(back == State(1));
  }
}

TEST(AutomaticCompression, MeasuresTheDeviceWhenItsRatesAreNotStated) {
  const std::string dir = fresh_dir("measured");
  Engine e(testing::test_options(dir, Compression::automatic));
  const SaveResult r = e.save(State(1).views(), meta_for(1));
  EXPECT_TRUE(r.note.empty()) << r.note;
  const ShardInfo info = inspect(r.path);
  EXPECT_GT(info.disk_read_bytes_per_s, 1e6);
  EXPECT_GT(info.disk_write_bytes_per_s, 1e6);
  // The probe leaves nothing behind.
  for (const auto& f : std::filesystem::recursive_directory_iterator(dir))
    EXPECT_EQ(f.path().filename().string().find(".disk-probe"), std::string::npos) << f.path();
  State back(0);
  EXPECT_EQ(e.restore(back.views(), nullptr).step, 1u);
  EXPECT_TRUE(back == State(1));
}

TEST(AutomaticCompression, BadRatesAndModesAreRefusedByName) {
  Options o = testing::test_options(fresh_dir("bad"));
  o.disk_read_bytes_per_s = -1;
  EXPECT_THROW(
      {
        try {
          Engine e(o);
        } catch (const Error& x) {
          EXPECT_EQ(x.code(), Code::invalid_argument);
          EXPECT_NE(std::string(x.what()).find("disk rate"), std::string::npos) << x.what();
          throw;
        }
      },
      Error);
  o.disk_read_bytes_per_s = 0;
  o.compression = static_cast<Compression>(7);
  EXPECT_THROW(Engine e(o), Error);
}

}  // namespace
}  // namespace sigma::checkpoint
