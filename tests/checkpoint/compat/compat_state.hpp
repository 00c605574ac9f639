// The state of the committed old-format checkpoints (tests/checkpoint/
// compat/format-vN/): two ranks, a base at step 1 and a delta at step 2, a
// split, a replicated and a local tensor of three dtypes. Values follow
// from (step, rank) alone, so a later build can say, bit for bit, what the
// old engine wrote.
#pragma once

#include <sigma/checkpoint.hpp>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

namespace sigma::checkpoint::compat {

constexpr uint32_t kWorld = 2;
constexpr int64_t kRows = 64, kCols = 48;  // the split tensor, global [kRows * kWorld, kCols]

struct CompatState {
  std::vector<float> slice;     // this rank's rows of "expert.w" (split along 0)
  std::vector<uint16_t> embed;  // "embed" (bf16, replicated)
  std::vector<int64_t> counts;  // "router.counts" (local)

  CompatState(uint64_t step, uint32_t rank) {
    slice.resize(static_cast<size_t>(kRows * kCols));
    for (size_t i = 0; i < slice.size(); ++i)
      // Only every 7th element moves between steps: the delta has unchanged,
      // changed and XOR-coded chunks.
      slice[i] = std::sin(0.01f * static_cast<float>(i + rank * slice.size())) +
                 (i % 7 == 0 && i < slice.size() / 2 ? 0.001f * static_cast<float>(step) : 0.0f);
    embed.resize(3000);
    for (size_t i = 0; i < embed.size(); ++i)
      embed[i] = static_cast<uint16_t>((i * 31 + (i < 500 ? step : 0)) & 0x7FFF);
    counts.resize(97);
    for (size_t i = 0; i < counts.size(); ++i) counts[i] = static_cast<int64_t>(i * (step + 1) + rank * 1000);
  }

  std::vector<TensorView> views(uint32_t rank) {
    return {split({"expert.w", HAL_DTYPE_F32, {kRows, kCols}, slice.data()}, 0, rank * kRows,
                  {kRows * kWorld, kCols}),
            replicated({"embed", HAL_DTYPE_BF16, {static_cast<int64_t>(embed.size())}, embed.data()}),
            {"router.counts", HAL_DTYPE_I64, {static_cast<int64_t>(counts.size())}, counts.data()}};
  }
};

// Small chunks (several per tensor), a base then a delta.
inline Options compat_options(const std::string& dir, uint32_t rank, uint32_t world) {
  Options o;
  o.dir = dir;
  o.job = "compat";
  o.rank = rank;
  o.world = world;
  o.chunk_bytes = 4096;
  o.base_every = 2;
  o.keep = 10;
  return o;
}

inline Metadata compat_meta(uint64_t step, uint32_t rank) {
  Metadata m;
  m.step = step;
  m.data_position = step * 64 + rank;
  m.rng_state = {9, 8, 7, static_cast<uint8_t>(step), static_cast<uint8_t>(rank)};
  m.loss_scale = 512.0 * static_cast<double>(step);
  m.guardrails_state = "{\"format\":\"compat\"}";
  m.parallel_plan = "{\"ep\":2}";
  m.extra = {{"written_by", "format-v1 engine"}};
  return m;
}

}  // namespace sigma::checkpoint::compat
