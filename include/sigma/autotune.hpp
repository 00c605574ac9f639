// sigma/autotune.hpp -- the MoE autotuner: moves experts off a rank whose
// link went slow and back once it recovered, with hysteresis; optionally
// also gives that rank a smaller share of the tokens (data re-balancing).
//
// The decision is pure: every rank of the expert group feeds the same
// per-rank samples (its exchange time and its link's retry rate, gathered
// over the group) and gets the same answer, so no rank has to tell the
// others what to do. Carrying a decision out is collective: the experts'
// state goes from the old owner to the new through the HAL, then every
// rank's Dispatcher takes the new placement. Moving an expert changes only
// where it runs: results stay bitwise the same (see Dispatcher). A token
// share changes which rank computes which tokens, so it is off by default
// and results with it are not bitwise those of a run without.
#pragma once

#include <sigma/export.hpp>

#include <sigma/parallel.hpp>

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace sigma::parallel {

struct BalancerOptions {
  // A rank's link is slow in a step when its link retries per second reach
  // this, or (when slow_ratio > 1) its exchange takes slow_ratio times the
  // group's median. Off by default: with synchronous collectives every rank
  // waits for the slowest, so exchange times name the group's slowness,
  // not the rank's (measured; docs/parallel.md). Link telemetry names it.
  double slow_retry_rate = 20;
  double slow_ratio = 0;
  uint32_t trigger_steps = 3;   // consecutive slow steps before its experts move off
  uint32_t recover_steps = 20;  // consecutive healthy steps before they come back
  // At most this many experts on one rank after a move (0: twice the even
  // share).
  uint32_t max_experts_per_rank = 0;
  // The share of the tokens a rank takes while its experts are moved off,
  // relative to an even share, in (0, 1]; the other ranks split the rest.
  // 1 (the default): tokens stay evenly split. With expert parallelism
  // alone a slow rank's own tokens still cross its link; a smaller share is
  // what shortens that (docs/parallel.md).
  double slow_token_share = 1;
};

// One rank's measurements of one step.
struct RankSample {
  double exchange_s = 0;       // time inside dispatch and combine
  double link_retry_rate = 0;  // HAL_FIELD_LINK_RETRIES per second since the last step
};

struct Move {
  uint32_t expert = 0, from = 0, to = 0;
};

// A change of placement and why.
struct Rebalance {
  uint64_t step = 0;
  std::string reason{};               // e.g. "rank 2 slow for 3 steps: 400 link retries/s, ..."
  std::vector<uint32_t> owner{};      // the new placement
  std::vector<Move> moves{};          // ascending by expert
  std::vector<RankSample> samples{};  // the measurements behind it
  // Each rank's share of the tokens after the change, relative to an even
  // share (mean 1); all 1 unless BalancerOptions::slow_token_share < 1.
  std::vector<double> token_share{};
};

// Splits `total` tokens (or sequences) over the ranks in proportion to
// `share`: floors first, then the remainders largest first (lowest rank on
// a tie), so the parts add up to `total` and every rank computes the same
// split. Pure.
SIGMA_EXPORT std::vector<uint64_t> split_tokens(uint64_t total, const std::vector<double>& share);

// The journal line of a rebalance (one JSON object, no newline).
SIGMA_EXPORT std::string rebalance_json(const Rebalance& r);

// Thread-safety: one thread. Pure: no I/O, no clock.
class SIGMA_EXPORT ExpertBalancer {
 public:
  // Starts from the default placement (contiguous blocks). Throws
  // Error(invalid_argument) when ep does not divide num_experts or an
  // option is out of range.
  ExpertBalancer(uint32_t num_experts, uint32_t ep, const BalancerOptions& options = {});
  // One step's samples, one per rank of the group. Returns a rebalance when
  // the placement or the token shares change (at most one per step), else
  // nothing.
  std::optional<Rebalance> observe(uint64_t step, const std::vector<RankSample>& samples);
  const std::vector<uint32_t>& owner() const { return owner_; }
  bool evacuated(uint32_t rank) const { return evacuated_.at(rank); }
  // Each rank's share of the tokens now (see Rebalance::token_share).
  const std::vector<double>& token_share() const { return token_share_; }
  // The whole decision state (placement, counters) as JSON, for a
  // checkpoint or a memory-tier snapshot; restore_state() takes it back.
  // Throws Error(invalid_argument) for text that is not such a state or
  // is one of another group (expert count, group size).
  std::string save_state() const;
  void restore_state(const std::string& json);

 private:
  std::optional<Rebalance> evacuate(uint64_t step, uint32_t rank, const std::vector<RankSample>& samples,
                                    const std::vector<bool>& slow, double median);
  std::optional<Rebalance> bring_back(uint64_t step, uint32_t rank, const std::vector<RankSample>& samples);
  // token_share_ from evacuated_; whether it changed.
  bool reshare();
  uint32_t num_experts_, ep_;
  BalancerOptions options_;
  std::vector<uint32_t> owner_, home_;
  std::vector<uint32_t> slow_steps_, healthy_steps_;
  std::vector<bool> evacuated_;
  std::vector<double> token_share_;
};

// Collective over the expert group: carries out `r`. For each move, in
// order, the old owner sends `state_of(expert)` (the expert's parameters and
// optimizer state, any bytes) and the new owner receives it into
// `adopt(expert, bytes)`; then `d` takes r.owner. Every rank calls it with
// the same `r`. Throws what the communicator throws (a peer that fails or
// stays silent past `timeout`), naming the expert and the ranks.
SIGMA_EXPORT void move_experts(Dispatcher& d, hal::Communicator& ep, uint32_t ep_rank, const Rebalance& r,
                               const std::function<std::vector<uint8_t>(uint32_t expert)>& state_of,
                               const std::function<void(uint32_t expert, std::vector<uint8_t> bytes)>& adopt,
                               std::chrono::nanoseconds timeout);

}  // namespace sigma::parallel
