// The MoE autotuner in the training loop. Every step each rank of the expert
// group measures its time inside the exchanges and its link's retry rate
// (HAL telemetry); the group gathers them (riding on the guardrails'
// exchange, or in one of their own) and sigma::parallel::ExpertBalancer
// decides, the same on every rank, whether experts move off a slow link or
// back (with replicas of the group, the same in every replica: below).
// move_experts carries each moving expert's parameters and AdamW moments
// through the HAL into a free slot of its new rank. Results do not change:
// an expert sees the same rows wherever it runs.
#pragma once

#include "adamw.hpp"
#include "model.hpp"

#include <sigma/autotune.hpp>
#include <sigma/hal.hpp>
#include <sigma/runtime.hpp>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>

namespace moe {

class Autotuner {
 public:
  Autotuner(uint32_t experts, uint32_t ep, int64_t slots)
      : balancer_(experts, ep, options(slots)), fresh_(balancer_.save_state()) {}

  // The placement as a state item: the balancer's state and each expert's
  // slot, saved with every snapshot. What the session restores is held
  // until apply(). Nothing is saved before the first apply(): the slots
  // are this rank's only once the trainer has set up.
  sigma::runtime::StateItem state_item(const Model& model) {
    sigma::runtime::StateItem it;
    it.name = "placement";
    it.max_bytes = 8 << 10;
    it.save = [this, &model] { return live_ ? encode(model) : std::string(); };
    it.restore = [this](std::string_view b) { held_.assign(b.data(), b.size()); };
    return it;
  }

  // After a join, a recovery or a rollback: the placement the state holds,
  // or the default one.
  void apply(Model& model, sigma::parallel::Dispatcher& d) {
    live_ = true;
    if (held_.empty()) {
      balancer_.restore_state(fresh_);
    } else {
      uint32_t n = 0;
      TORCH_CHECK(held_.size() >= 4, "placement: truncated");
      std::memcpy(&n, held_.data(), 4);
      TORCH_CHECK(held_.size() >= 4 + 4ull * n, "placement: truncated slots");
      model.slot_of.assign(n, -1);
      std::memcpy(model.slot_of.data(), held_.data() + 4, 4ull * n);
      balancer_.restore_state(held_.substr(4 + 4ull * n));
    }
    d.set_placement(balancer_.owner());
    last_t_ = -1;
  }

  // This rank's sample of the step: its time inside the exchanges and its
  // link's retry rate. It travels in the guardrails' exchange where they
  // run (no collective of its own), else through gather().
  std::vector<double> sample(Model& model, const sigma::hal::PluginPtr& plugin) {
    return {model.take_exchange_seconds(), retry_rate(plugin)};
  }

  // With data-parallel replicas of the expert group (sigmarun's replica
  // groups) every replica keeps one placement: their expert gradients are
  // summed slot by slot, and a rejoining replica takes a donor's slots. So
  // every replica decides on the same samples: each position's, the worst
  // of its live counterparts' (the largest exchange time, the largest retry
  // rate; the replicas step together, at the slowest one's pace). They
  // travel in the step's data-parallel figures, one slot per replica: put()
  // fills this replica's, and after the sum (the slots are disjoint, so it
  // is exact) worst() reads the live ones. A replica out of the step leaves
  // its slot empty; a rejoining one replaying the stream reads what the
  // live replicas read.
  static constexpr size_t kSlot = 3;  // exchange seconds, retry rate, present
  static size_t slots_size(uint32_t replicas) { return kSlot * replicas; }
  static void put(const std::vector<double>& mine, double* slots, uint32_t replica) {
    TORCH_CHECK(mine.size() + 1 == kSlot, "autotuner: a sample of ", mine.size(), " figures");
    double* slot = slots + kSlot * replica;
    std::copy(mine.begin(), mine.end(), slot);
    slot[kSlot - 1] = 1;
  }
  static std::vector<double> worst(const double* slots, uint32_t replicas) {
    std::vector<double> out(kSlot - 1, 0.0);
    for (uint32_t r = 0; r < replicas; ++r) {
      const double* slot = slots + kSlot * r;
      if (slot[kSlot - 1] <= 0) continue;
      for (size_t i = 0; i < out.size(); ++i) out[i] = std::max(out[i], slot[i]);
    }
    return out;
  }

  // Collective over the session's communicator (the expert group is the
  // world where the autotuner runs without replicas): every rank's sample,
  // rank after rank.
  static std::vector<double> gather(const std::vector<double>& mine, sigma::runtime::Session& s,
                                    uint32_t ep_size) {
    std::vector<double> all(mine.size() * ep_size);
    std::copy(mine.begin(), mine.end(), all.begin() + static_cast<std::ptrdiff_t>(mine.size() * s.rank()));
    s.all_gather(all.data(), mine.size(), HAL_DTYPE_F64);
    return all;
  }

  // From every rank's sample (the same on every rank): the balancer decides
  // and, collectively over the expert group, experts move. Returns the move.
  std::optional<sigma::parallel::Rebalance> step(uint64_t step, const std::vector<double>& all, Model& model,
                                                 AdamW& opt, sigma::parallel::Dispatcher& d,
                                                 sigma::hal::Communicator& ep, uint32_t ep_rank) {
    std::vector<sigma::parallel::RankSample> samples;
    for (size_t r = 0; r + 1 < all.size(); r += 2) samples.push_back({all[r], all[r + 1]});
    auto r = balancer_.observe(step, samples);
    if (!r) return r;
    sigma::parallel::move_experts(
        d, ep, ep_rank, *r, [&](uint32_t e) { return take(model, opt, e); },
        [&](uint32_t e, std::vector<uint8_t> bytes) { adopt(model, opt, e, bytes); },
        std::chrono::seconds(60));
    return r;
  }

 private:
  static sigma::parallel::BalancerOptions options(int64_t slots) {
    sigma::parallel::BalancerOptions o;
    o.max_experts_per_rank = static_cast<uint32_t>(slots);
    return o;
  }

  // HAL_FIELD_LINK_RETRIES per second since the last step; 0 when unknown.
  double retry_rate(const sigma::hal::PluginPtr& plugin) {
    double rate = 0;
    try {
      const auto s = plugin->read_telemetry(0, {HAL_FIELD_LINK_RETRIES});
      const double now =
          std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
      if (!s.empty() && s[0].status == HAL_OK) {
        if (last_t_ >= 0 && now > last_t_)
          rate = static_cast<double>(s[0].value.u64 - last_retries_) / (now - last_t_);
        last_retries_ = s[0].value.u64;
        last_t_ = now;
      }
    } catch (const sigma::Error&) {
      // A device without the counter (or a failed read) gives no link signal.
    }
    return rate;
  }

  // The tensors an expert's state lives in, in the order it travels.
  static std::vector<torch::Tensor*> parts(Model& model, AdamW& opt) {
    return {&model.expert, &opt.m, &opt.v};
  }

  // Expert e's parameters and moments, every layer; its slot is emptied.
  static std::vector<uint8_t> take(Model& model, AdamW& opt, uint32_t e) {
    const int32_t slot = model.slot_of.at(e);
    const int64_t n = model.slot_numel(), L = model.config().layers;
    std::vector<uint8_t> bytes(static_cast<size_t>(3 * L * n) * sizeof(float));
    size_t at = 0;
    for (torch::Tensor* t : parts(model, opt)) {
      for (int64_t l = 0; l < L; ++l) {
        torch::Tensor range = t->narrow(0, model.slot_offset(l, slot), n);
        std::memcpy(bytes.data() + at, range.data_ptr(), static_cast<size_t>(n) * sizeof(float));
        range.zero_();
        at += static_cast<size_t>(n) * sizeof(float);
      }
    }
    model.slot_of[e] = -1;
    return bytes;
  }

  // Expert e arrives: into the lowest free slot.
  static void adopt(Model& model, AdamW& opt, uint32_t e, const std::vector<uint8_t>& bytes) {
    std::vector<bool> used(static_cast<size_t>(model.slots()), false);
    for (int32_t s : model.slot_of)
      if (s >= 0) used[static_cast<size_t>(s)] = true;
    int32_t slot = 0;
    while (slot < model.slots() && used[static_cast<size_t>(slot)]) ++slot;
    TORCH_CHECK(slot < model.slots(), "no free expert slot for expert ", e);
    const int64_t n = model.slot_numel(), L = model.config().layers;
    TORCH_CHECK(bytes.size() == static_cast<size_t>(3 * L * n) * sizeof(float), "expert ", e, ": wrong size");
    size_t at = 0;
    for (torch::Tensor* t : parts(model, opt)) {
      for (int64_t l = 0; l < L; ++l) {
        std::memcpy(t->narrow(0, model.slot_offset(l, slot), n).data_ptr(), bytes.data() + at,
                    static_cast<size_t>(n) * sizeof(float));
        at += static_cast<size_t>(n) * sizeof(float);
      }
    }
    model.slot_of[e] = slot;
  }

  std::string encode(const Model& model) const {
    const auto n = static_cast<uint32_t>(model.slot_of.size());
    std::string out(4 + 4ull * n, '\0');
    std::memcpy(out.data(), &n, 4);
    std::memcpy(out.data() + 4, model.slot_of.data(), 4ull * n);
    return out + balancer_.save_state();
  }

  sigma::parallel::ExpertBalancer balancer_;
  std::string fresh_;  // the default placement's state
  std::string held_;   // the placement the state restored, for apply()
  bool live_ = false;
  uint64_t last_retries_ = 0;
  double last_t_ = -1;
};

}  // namespace moe
