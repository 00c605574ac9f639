// A deterministic training-like state for the checkpoint tests: a few
// tensors of several dtypes whose values at step s follow from s, changing
// a little from step to step (as weights under an optimiser do).
#pragma once

#include <sigma/checkpoint.hpp>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

namespace sigma::checkpoint::testing {

struct State {
  std::vector<float> w1, w2;     // weights
  std::vector<uint16_t> h;       // a bf16 tensor
  std::vector<int64_t> routing;  // an integer table
  std::vector<uint8_t> empty;    // a tensor with no elements

  explicit State(uint64_t step, size_t scale = 1) {
    w1.resize(300000 * scale);
    w2.resize(4099);
    h.resize(70001);
    routing.resize(513);
    for (size_t i = 0; i < w1.size(); ++i)
      // Only the first eighth moves from step to step: the rest of its chunks are unchanged.
      w1[i] = std::sin(0.001f * static_cast<float>(i)) +
              (i < w1.size() / 8 && i % 97 == step % 97 ? 1e-3f * static_cast<float>(step) : 0.0f);
    for (size_t i = 0; i < w2.size(); ++i) w2[i] = static_cast<float>(i) * 0.5f + static_cast<float>(step);
    for (size_t i = 0; i < h.size(); ++i) h[i] = static_cast<uint16_t>((i * 7 + step) & 0x3FFF);
    for (size_t i = 0; i < routing.size(); ++i) routing[i] = static_cast<int64_t>(i * step) - 7;
  }

  std::vector<TensorView> views() {
    return {{"layers.0.weight", HAL_DTYPE_F32, {static_cast<int64_t>(w1.size() / 100), 100}, w1.data()},
            {"layers.1.weight", HAL_DTYPE_F32, {static_cast<int64_t>(w2.size())}, w2.data()},
            {"embed.bf16", HAL_DTYPE_BF16, {static_cast<int64_t>(h.size())}, h.data()},
            {"moe.routing", HAL_DTYPE_I64, {static_cast<int64_t>(routing.size())}, routing.data()},
            {"empty", HAL_DTYPE_U8, {0, 5}, empty.data()}};
  }

  bool operator==(const State& o) const {
    return w1 == o.w1 && w2 == o.w2 && h == o.h && routing == o.routing;
  }
};

// The engine options the tests share: small chunks (many per tensor), a
// base every 4 checkpoints, everything kept, every chunk compressed (what
// the codec tests look at; the automatic choice depends on the machine's
// measured rates, and compression_test.cpp covers it and raw chunks).
inline Options test_options(const std::string& dir, Compression compression = Compression::always) {
  Options o;
  o.dir = dir;
  o.compression = compression;
  o.chunk_bytes = 64 << 10;
  o.base_every = 4;
  o.keep = 10;
  return o;
}

inline Metadata meta_for(uint64_t step) {
  Metadata m;
  m.step = step;
  m.data_position = step * 32;
  m.rng_state = {1, 2, 3, static_cast<uint8_t>(step)};
  m.loss_scale = 1024.0 / static_cast<double>(step + 1);
  m.guardrails_state = "{\"format\":\"x\"}";
  m.parallel_plan = "{\"dp\":2}";
  m.extra = {{"model", "tiny"}, {"step_note", std::to_string(step)}};
  return m;
}

}  // namespace sigma::checkpoint::testing
