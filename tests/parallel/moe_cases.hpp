// The MoE dispatch cases, shared by the test (which computes the
// single-process reference) and the rank worker (which runs one rank): the
// inputs are drawn from a fixed seed, so both sides see the same tokens.
#pragma once

#include <sigma/kernels.hpp>
#include <sigma/parallel.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <vector>

namespace sigma::test {

constexpr uint32_t kExperts = 8;
constexpr uint64_t kHidden = 16;

inline float load(const uint8_t* p, hal_dtype_t dtype) {
  uint32_t bits = 0;
  if (dtype == HAL_DTYPE_BF16) {
    uint16_t h;
    std::memcpy(&h, p, 2);
    bits = static_cast<uint32_t>(h) << 16;
  } else {
    std::memcpy(&bits, p, 4);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// bf16: round to nearest even (finite values only, as the cases use).
inline void store(float f, uint8_t* p, hal_dtype_t dtype) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  if (dtype == HAL_DTYPE_BF16) {
    bits += 0x7FFF + ((bits >> 16) & 1);
    const auto h = static_cast<uint16_t>(bits >> 16);
    std::memcpy(p, &h, 2);
    return;
  }
  std::memcpy(p, &bits, 4);
}

// An expert whose output depends on every row of its batch and their order
// (the sum over the batch is accumulated in row order): equal outputs mean
// the expert saw the same rows in the same order.
inline std::vector<float> run_expert(uint32_t e, const float* rows, uint64_t n) {
  std::vector<float> out(n * kHidden);
  float batch_sum = 0;
  for (uint64_t r = 0; r < n; ++r) batch_sum += rows[r * kHidden] * 0.37f;
  for (uint64_t r = 0; r < n; ++r)
    for (uint64_t i = 0; i < kHidden; ++i) {
      float acc = 0;
      for (uint64_t j = 0; j < kHidden; ++j)
        acc += std::sin(static_cast<float>(e * 31 + i * 7 + j * 3)) * 0.25f * rows[r * kHidden + j];
      out[r * kHidden + i] = std::tanh(acc) + 0.01f * batch_sum;
    }
  return out;
}

// Expert-major rows of any dtype through the f32 experts; block l is
// expert ids[l].
inline std::vector<uint8_t> run_experts(const std::vector<uint8_t>& rows,
                                        const std::vector<uint64_t>& offsets,
                                        const std::vector<uint32_t>& ids, hal_dtype_t dtype) {
  const uint64_t es = hal::dtype_size(dtype);
  std::vector<uint8_t> out(std::max<size_t>(rows.size(), 1));
  for (size_t l = 0; l + 1 < offsets.size(); ++l) {
    const uint64_t n = offsets[l + 1] - offsets[l], at = offsets[l] * kHidden;
    std::vector<float> in(n * kHidden);
    for (uint64_t i = 0; i < n * kHidden; ++i) in[i] = load(rows.data() + (at + i) * es, dtype);
    const auto y = run_expert(ids[l], in.data(), n);
    for (uint64_t i = 0; i < n * kHidden; ++i) store(y[i], out.data() + (at + i) * es, dtype);
  }
  return out;
}

struct Case {
  std::vector<uint64_t> tokens_per_rank;
  parallel::RouterOptions router;
  parallel::Exchange exchange = parallel::Exchange::all_to_all;
  hal_dtype_t dtype = HAL_DTYPE_F32;
  std::vector<uint32_t> placement{};  // expert -> rank; empty: contiguous blocks
  bool rounds = true;                 // false: one exchange each way and a regroup copy (rows of any size)
};

inline parallel::RouterOptions router(uint32_t top_k, double cf,
                                      parallel::DropPolicy drop = parallel::DropPolicy::probability) {
  parallel::RouterOptions o;
  o.num_experts = kExperts;
  o.top_k = top_k;
  o.capacity_factor = cf;
  o.drop = drop;
  return o;
}

inline const std::map<std::string, Case>& cases() {
  using parallel::DropPolicy;
  using parallel::Exchange;
  static const std::map<std::string, Case> all = {
      {"top2_capacity_empty_rank", {{37, 0, 64, 21}, router(2, 1.0)}},
      {"top1_position", {{50, 33, 0, 48}, router(1, 1.25, DropPolicy::position)}},
      {"dropless_top2", {{40, 17, 29, 3}, router(2, 0)}},
      {"all_gather", {{37, 0, 64, 21}, router(2, 1.0), Exchange::all_gather}},
      {"bf16", {{24, 31, 0, 9}, router(2, 0), Exchange::all_to_all, HAL_DTYPE_BF16}},
      {"stats", {{64, 64, 64, 64}, router(2, 1.0)}},
      // The same 96 tokens split over 1, 2 and 4 ranks.
      {"split1", {{96}, router(2, 0)}},
      {"split2", {{50, 46}, router(2, 0)}},
      {"split4", {{30, 0, 41, 25}, router(2, 0)}},
      // Experts placed anyhow, rank 3 holding none: the same results.
      {"placement",
       {{37, 0, 64, 21}, router(2, 1.0), Exchange::all_to_all, HAL_DTYPE_F32, {2, 0, 2, 1, 1, 0, 2, 1}}},
      {"placement_all_gather",
       {{37, 0, 64, 21}, router(2, 1.0), Exchange::all_gather, HAL_DTYPE_F32, {2, 0, 2, 1, 1, 0, 2, 1}}},
      // One all-to-all(v) each way and a regroup copy instead of rounds.
      {"one_exchange", {{40, 17, 29, 3}, router(2, 0), Exchange::all_to_all, HAL_DTYPE_F32, {}, false}},
      {"placement_one_exchange",
       {{37, 0, 64, 21},
        router(2, 1.0),
        Exchange::all_to_all,
        HAL_DTYPE_F32,
        {2, 0, 2, 1, 1, 0, 2, 1},
        false}},
  };
  return all;
}

struct Inputs {
  std::vector<std::vector<float>> logits;    // per rank
  std::vector<std::vector<uint8_t>> tokens;  // per rank, in the dtype
};

// One token stream from a fixed seed, cut into the ranks' shares; skewed
// logits (experts 0 and 1 popular) so that capacity drops choices.
inline Inputs make_inputs(const Case& c) {
  std::mt19937 rng(42);
  std::normal_distribution<float> n01(0, 1);
  const uint64_t es = hal::dtype_size(c.dtype);
  Inputs in;
  for (uint64_t t : c.tokens_per_rank) {
    std::vector<float> lg(t * kExperts);
    std::vector<uint8_t> tok(t * kHidden * es);
    for (uint64_t i = 0; i < t; ++i) {
      for (uint32_t e = 0; e < kExperts; ++e) lg[i * kExperts + e] = n01(rng) + (e < 2 ? 1.5f : 0.f);
      for (uint64_t h = 0; h < kHidden; ++h) store(n01(rng), tok.data() + (i * kHidden + h) * es, c.dtype);
    }
    in.logits.push_back(std::move(lg));
    in.tokens.push_back(std::move(tok));
  }
  return in;
}

// One process, no communication: each rank's routing (capacity is per
// rank), one plan over all tokens in rank order, each expert run once, the
// outputs cut back into the ranks' shares.
inline std::vector<std::vector<uint8_t>> reference(const Case& c, const Inputs& in) {
  const uint32_t K = c.router.top_k;
  const uint64_t es = hal::dtype_size(c.dtype);
  std::vector<int32_t> ids;
  std::vector<float> weights;
  std::vector<uint8_t> tokens;
  uint64_t total = 0;
  for (size_t r = 0; r < in.logits.size(); ++r) {
    const auto ro = parallel::route(in.logits[r].data(), c.tokens_per_rank[r], c.router);
    ids.insert(ids.end(), ro.expert_ids.begin(), ro.expert_ids.end());
    weights.insert(weights.end(), ro.weights.begin(), ro.weights.end());
    tokens.insert(tokens.end(), in.tokens[r].begin(), in.tokens[r].end());
    total += c.tokens_per_rank[r];
  }
  std::vector<int64_t> row_of(total * K);
  std::vector<uint64_t> offsets(kExperts + 1);
  kernels::moe_plan(ids.data(), total, K, kExperts, row_of.data(), offsets.data());
  std::vector<uint8_t> rows(std::max<uint64_t>(1, offsets[kExperts] * kHidden * es));
  kernels::moe_permute(tokens.data(), total, kHidden, c.dtype, row_of.data(), K, rows.data());
  std::vector<uint32_t> all(kExperts);
  for (uint32_t e = 0; e < kExperts; ++e) all[e] = e;
  const auto y = run_experts(rows, offsets, all, c.dtype);
  std::vector<uint8_t> out(total * kHidden * es);
  kernels::moe_unpermute(y.data(), row_of.data(), weights.data(), total, K, kHidden, c.dtype, out.data());
  std::vector<std::vector<uint8_t>> per_rank;
  auto at = out.begin();
  for (uint64_t t : c.tokens_per_rank) {
    per_rank.emplace_back(at, at + static_cast<ptrdiff_t>(t * kHidden * es));
    at += static_cast<ptrdiff_t>(t * kHidden * es);
  }
  return per_rank;
}

}  // namespace sigma::test
