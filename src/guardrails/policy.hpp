// The guardrails' policies as pure state machines over already-reduced
// figures: no I/O, no collectives, so they are unit-tested step by step and
// every rank, fed the same figures, reaches the same decision.
#pragma once

#include <sigma/guardrails.hpp>

#include <deque>
#include <optional>
#include <string>
#include <vector>

namespace sigma::guardrails::detail {

// GradScaler semantics.
class LossScaler {
 public:
  explicit LossScaler(const LossScalingConfig& c);
  double scale() const { return scale_; }
  // Feeds one step's outcome; returns the scale for the next step.
  double update(bool overflow);
  uint64_t clean_steps() const { return clean_; }
  void restore(double scale, uint64_t clean) { scale_ = scale, clean_ = clean; }

 private:
  LossScalingConfig c_;
  double scale_;
  uint64_t clean_ = 0;
};

// Median/MAD over the last accepted losses.
class SpikeDetector {
 public:
  explicit SpikeDetector(const SpikeConfig& c) : c_(c) {}
  struct Verdict {
    bool spike = false;
    double median = 0, mad = 0, limit = 0;  // the figures it decided on
  };
  // Judges `loss` against the history (the history is not changed).
  Verdict judge(double loss) const;
  // Adds an accepted loss.
  void accept(uint64_t step, double loss);
  // Forgets losses of steps after `step` (they will be recomputed).
  void rewind(uint64_t step);
  // Records a spike; true when this makes escalate_after within escalate_within.
  bool record_spike(uint64_t step);
  const std::deque<std::pair<uint64_t, double>>& history() const { return history_; }
  const std::deque<uint64_t>& spikes() const { return spikes_; }
  // Takes a saved history; keeps the newest `window` losses of it.
  void restore(std::deque<std::pair<uint64_t, double>> h, std::deque<uint64_t> s) {
    history_ = std::move(h), spikes_ = std::move(s);
    while (history_.size() > c_.window) history_.pop_front();
  }

 private:
  SpikeConfig c_;
  std::deque<std::pair<uint64_t, double>> history_;  // (step, loss), oldest first
  std::deque<uint64_t> spikes_;
};

// One layer's precision state.
class LayerPrecision {
 public:
  LayerPrecision(const PrecisionConfig& c, hal_dtype_t low) : c_(c), low_(low) {}
  enum class Change { none, escalate, deescalate };
  struct Verdict {
    Change change = Change::none;
    std::string why;
  };
  // One step: did any rank see a non-finite gradient in this layer, the
  // largest |g| over ranks after unscaling (finite values), and the largest
  // |activation| over ranks (0 when the caller reports none; beyond the
  // dtype's range it is an overflow too).
  Verdict observe(bool overflow, double unscaled_amax, double activation_amax = 0);
  // Escalated from outside (repeated spikes).
  void force_escalate();
  bool escalated() const { return escalated_; }
  // Headroom in bits of `amax` below the low dtype's largest finite value
  // (-inf for a value that is not finite).
  double headroom_bits(double amax) const;
  // The low dtype's largest finite value.
  double top() const;

  struct State {
    bool escalated = false;
    uint64_t calm = 0;
    std::vector<bool> window;
  };
  State state() const { return {escalated_, calm_, std::vector<bool>(window_.begin(), window_.end())}; }
  void restore(const State& s);

 private:
  PrecisionConfig c_;
  hal_dtype_t low_;
  bool escalated_ = false;
  uint64_t calm_ = 0;        // steps in a row with no trouble, while escalated
  std::deque<bool> window_;  // overflow per recent step
  uint64_t overflows_ = 0;   // count of true in window_
};

}  // namespace sigma::guardrails::detail
