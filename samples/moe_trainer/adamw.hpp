// AdamW over one flat buffer, in place; its moments are part of the state
// the session snapshots.
#pragma once

#include <torch/torch.h>

#include <cmath>
#include <cstdint>

namespace moe {

struct AdamW {
  torch::Tensor m, v;
  explicit AdamW(const torch::Tensor& p) : m(torch::zeros_like(p)), v(torch::zeros_like(p)) {}
  void update(torch::Tensor& p, const torch::Tensor& g, double lr, double wd, uint64_t t) {
    torch::NoGradGuard ng;
    const double b1 = 0.9, b2 = 0.95, eps = 1e-8;
    m.mul_(b1).add_(g, 1 - b1);
    v.mul_(b2).addcmul_(g, g, 1 - b2);
    const double c1 = 1 - std::pow(b1, static_cast<double>(t)), c2 = 1 - std::pow(b2, static_cast<double>(t));
    p.mul_(1 - lr * wd);
    p.addcdiv_(m, (v / c2).sqrt_().add_(eps), -lr / c1);
  }
};

}  // namespace moe
