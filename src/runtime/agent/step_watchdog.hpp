// The step watchdog: no step completed for step_timeout_s while every
// process still beats means a collective is stuck. The rank(s) behind the
// others are the hung ones; when every rank sits at the same place, nobody
// stands out. It watches training and the recomputation after a recovery
// alike, and is quiet while a recovery round runs.
//
// Pure: progress, positions and a clock in, a verdict out. Part of the
// agent's Coordinator. Thread-safety: one thread at a time.
#pragma once

#include <compare>
#include <cstdint>
#include <optional>
#include <vector>

namespace sigma::runtime::agent {

// Where a rank is, from its heartbeats: inside `step`, or past its own
// work in it (`done`, in step_end). Ordered, so that a rank stuck inside a
// step's collective is behind a peer that finished it; no position (before
// its first heartbeat) is behind every position.
struct StepPosition {
  int64_t step = 0;
  bool done = false;
  auto operator<=>(const StepPosition&) const = default;
};

class StepWatchdog {
 public:
  struct Verdict {
    enum class Kind : uint8_t {
      none,                // progress, or the timeout has not passed
      every_rank_stalled,  // all at one position: abort the collective and retry
      behind,              // the ranks at `lowest` are stuck where their peers finished
    };
    Kind kind = Kind::none;
    std::optional<StepPosition> lowest;  // behind: the stuck ranks' position
    int64_t step = 0;                    // the step the lowest rank is in (0 before any heartbeat)
  };

  // timeout_s <= 0: the watchdog is off.
  explicit StepWatchdog(double timeout_s) : timeout_s_(timeout_s) {}

  // Called on every tick. `watching`: the job trains or recomputes
  // (started, and no round short of its rejoin). `progress`: steps done.
  // True when the timeout has passed with no progress; the timeout then
  // starts again. Costs nothing per rank: the positions are read only then.
  bool due(bool watching, uint64_t progress, double t);
  // Once due: the verdict on the positions of the members still working
  // (not finished); none when there are none.
  static Verdict judge(const std::vector<std::optional<StepPosition>>& working);

 private:
  double timeout_s_;
  uint64_t progress_ = 0;
  double since_ = 0;
};

}  // namespace sigma::runtime::agent
