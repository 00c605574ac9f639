// A small model cut into pipeline stages, shared by the pipeline test (the
// reference, one process, no pipeline) and the rank worker (one stage):
// stage s is y = tanh(W_s x) on rows of kWidth; the loss is 0.5 * |y|^2 of
// the last stage; gradients accumulate over micro-batches in order.
#pragma once

#include <cmath>
#include <cstdint>
#include <map>
#include <vector>

namespace sigma::test {

constexpr uint32_t kWidth = 8, kRows = 4;
constexpr uint64_t kActivationBytes = kRows * kWidth * sizeof(float);

inline std::vector<float> weights(uint32_t stage) {
  std::vector<float> w(kWidth * kWidth);
  for (uint32_t i = 0; i < w.size(); ++i) w[i] = std::sin(static_cast<float>(stage * 97 + i * 13)) * 0.4f;
  return w;
}

inline std::vector<float> input(uint32_t micro) {
  std::vector<float> x(kRows * kWidth);
  for (uint32_t i = 0; i < x.size(); ++i) x[i] = std::cos(static_cast<float>(micro * 31 + i * 7));
  return x;
}

// One stage: keeps each micro-batch's input and output for its backward.
struct Stage {
  std::vector<float> w, dw;
  std::map<uint32_t, std::pair<std::vector<float>, std::vector<float>>> saved;
  explicit Stage(uint32_t s) : w(weights(s)), dw(kWidth * kWidth, 0.f) {}

  std::vector<float> forward(uint32_t micro, const float* x) {
    std::vector<float> in(x, x + kRows * kWidth), y(kRows * kWidth);
    for (uint32_t r = 0; r < kRows; ++r)
      for (uint32_t i = 0; i < kWidth; ++i) {
        float acc = 0;
        for (uint32_t j = 0; j < kWidth; ++j) acc += w[i * kWidth + j] * in[r * kWidth + j];
        y[r * kWidth + i] = std::tanh(acc);
      }
    saved[micro] = {in, y};
    return y;
  }

  // grad_y: nullptr on the last stage (the loss's gradient is y itself).
  std::vector<float> backward(uint32_t micro, const float* grad_y) {
    auto [x, y] = saved.at(micro);
    saved.erase(micro);
    std::vector<float> d(kRows * kWidth), gx(kRows * kWidth, 0.f);
    for (uint32_t k = 0; k < d.size(); ++k) d[k] = (grad_y ? grad_y[k] : y[k]) * (1 - y[k] * y[k]);
    for (uint32_t r = 0; r < kRows; ++r)
      for (uint32_t i = 0; i < kWidth; ++i)
        for (uint32_t j = 0; j < kWidth; ++j) {
          dw[i * kWidth + j] += d[r * kWidth + i] * x[r * kWidth + j];
          gx[r * kWidth + j] += w[i * kWidth + j] * d[r * kWidth + i];
        }
    return gx;
  }
};

// Every stage's accumulated weight gradient, no pipeline: each micro-batch
// forward through all stages and back, in order.
inline std::vector<std::vector<float>> reference_gradients(uint32_t stages, uint32_t micro_batches) {
  std::vector<Stage> model;
  for (uint32_t s = 0; s < stages; ++s) model.emplace_back(s);
  for (uint32_t m = 0; m < micro_batches; ++m) {
    std::vector<float> a = input(m);
    for (auto& st : model) a = st.forward(m, a.data());
    std::vector<float> g;
    for (uint32_t s = stages; s-- > 0;) g = model[s].backward(m, s + 1 == stages ? nullptr : g.data());
  }
  std::vector<std::vector<float>> out;
  for (auto& st : model) out.push_back(st.dw);
  return out;
}

}  // namespace sigma::test
