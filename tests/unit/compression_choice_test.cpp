// Whether the checkpoint engine compresses a chunk: the pure model of
// src/checkpoint/compression_choice.hpp, on the rates of the machines it
// meets (a fast local NVMe with two cores, a network file system, many
// cores) and the chunks it meets (weights, deltas of a step, all zeros).
#include "checkpoint/compression_choice.hpp"

#include <gtest/gtest.h>

namespace sigma::checkpoint::choice {
namespace {

constexpr double GB = 1e9;
const DiskRates kNvme{3.4 * GB, 1.4 * GB};  // this project's machine: cold reads, O_DIRECT writes
const DiskRates kNfs{0.2 * GB, 0.15 * GB};  // a shared file system over 10 GbE, busy

// fp32 weights byte-plane shuffled: zstd keeps 0.83 of the bytes at about
// 0.45 GB/s per thread encoding and 0.9 GB/s decoding (hashes included).
const Sample kWeights{0.83, 0.45 * GB, 0.9 * GB, 0};

TEST(CompressionChoice, TheModelIsTheDocumentedOne) {
  const Costs c = costs(kWeights, kNvme, 2);
  EXPECT_DOUBLE_EQ(c.raw_save, 1 / (1.4 * GB));
  EXPECT_DOUBLE_EQ(c.raw_restore, 1 / (3.4 * GB));
  EXPECT_DOUBLE_EQ(c.zstd_save, 1 / (0.9 * GB));     // encode-bound: 2 threads of 0.45
  EXPECT_DOUBLE_EQ(c.zstd_restore, 1 / (1.8 * GB));  // decode-bound
  const Costs d = costs({0.1, 5 * GB, 5 * GB, 0.83}, kNvme, 2);
  EXPECT_DOUBLE_EQ(d.zstd_restore, (0.1 + 0.83) / (3.4 * GB));  // a delta reads its base chunk too
}

TEST(CompressionChoice, AFastDiskAndTwoCoresStoreWeightsRaw) {
  EXPECT_FALSE(compress(Compression::automatic, costs(kWeights, kNvme, 2)));
}

TEST(CompressionChoice, ASlowFileSystemCompressesTheSameWeights) {
  EXPECT_TRUE(compress(Compression::automatic, costs(kWeights, kNfs, 2)));
}

TEST(CompressionChoice, EnoughCoresMakeCompressionPayOnTheFastDiskToo) {
  // 64 threads encode at 29 GB/s: both sides are disk-bound, and fewer bytes win.
  EXPECT_TRUE(compress(Compression::automatic, costs(kWeights, kNvme, 64)));
}

TEST(CompressionChoice, ADeltaThatMustReadItsBaseIsRawUnlessItsBaseIsSmall) {
  // XOR against the base leaves 0.1 of the bytes, decoded fast; but a
  // restore of it reads the base chunk as well.
  const Sample raw_base{0.1, 8 * GB, 8 * GB, 1.0}, small_base{0.1, 8 * GB, 8 * GB, 0.5};
  EXPECT_FALSE(compress(Compression::automatic, costs(raw_base, kNfs, 2)));   // 1.1 of the bytes read
  EXPECT_TRUE(compress(Compression::automatic, costs(small_base, kNfs, 2)));  // 0.6
}

TEST(CompressionChoice, CompressionThatSavesNoTimeOnOneSideIsNotTaken) {
  // Restores faster but saves slower (encoding is the bound): raw.
  const Sample slow_encode{0.5, 0.05 * GB, 10 * GB, 0};
  const Costs c = costs(slow_encode, kNfs, 2);
  EXPECT_LT(c.zstd_restore, c.raw_restore);
  EXPECT_GT(c.zstd_save, c.raw_save);
  EXPECT_FALSE(compress(Compression::automatic, c));
}

TEST(CompressionChoice, ForcedModesIgnoreTheFigures) {
  EXPECT_TRUE(compress(Compression::always, costs(kWeights, kNvme, 2)));
  EXPECT_FALSE(compress(Compression::never, costs(kWeights, kNfs, 2)));
}

TEST(CompressionChoice, UnknownDiskRatesStoreRaw) {
  EXPECT_FALSE(compress(Compression::automatic, costs(kWeights, {}, 2)));
}

TEST(CompressionChoice, TheExplanationGivesBothWaysFigures) {
  EXPECT_EQ(explain(false, costs(kWeights, kNvme, 2)),
            "raw: zstd saves at 900 MB/s and restores at 1800 MB/s, raw at 1400 MB/s and 3400 MB/s");
}

}  // namespace
}  // namespace sigma::checkpoint::choice
