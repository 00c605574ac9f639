// Step times in bounded memory, for the ledger and the report: the newest
// steps by index (a step ends when its slowest rank does, so the slowest
// rank's time wins), then a window of settled steps for the median. A
// settled step slower than 1.5 x the median, once ten are known, is charged
// as slow by what it took beyond the median.
//
// Pure: times in, charges out. Thread-safety: one thread at a time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>

namespace sigma::runtime::agent {

class StepTimes {
 public:
  // The newest steps kept unsettled (a late rank's time still counts).
  static constexpr size_t kRecent = 64;
  // Settled steps the median is taken over.
  static constexpr size_t kWindow = 1001;

  // A rank finished `step` in `seconds`. Settles all but the newest
  // kRecent steps and returns the slow seconds they are charged.
  double finished(uint64_t step, double seconds);
  // Settles every step (at the end of the job); returns the slow seconds.
  double settle_all() { return settle(0); }
  // The median over the settled window; 0 before any step settled.
  double median() const;

 private:
  double settle(size_t keep);

  std::map<uint64_t, double> recent_;  // step -> its slowest rank's seconds
  std::deque<double> window_;
};

}  // namespace sigma::runtime::agent
