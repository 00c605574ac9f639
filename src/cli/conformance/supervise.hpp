// The parent's view of the suite's worker processes: what each has
// reported, which check each is in, and when an attempt must end. Pure
// bookkeeping: streamed lines, exits and a clock in, verdicts out; main.cpp
// does the processes and pipes.
//
// A worker streams one JSON object per line: {"group": I, "name": N} when a
// check group starts, {"begin": CHECK} when a check starts, {"result": R}
// when it ends, {"end": true} after the last group.
#pragma once

#include "suite.hpp"

#include <optional>
#include <string>
#include <vector>

namespace sigma::conformance {

// Why an attempt ends before every worker finished.
struct Stop {
  uint32_t rank = 0;
  std::string check;   // the check the rank was in ("" between checks)
  uint32_t group = 0;  // the group it was in
  std::string detail;  // "killed by signal Segmentation fault", "still running after 30 s", ...
  bool final = false;  // nothing can run after it (the suite's time is up, or the plugin does not load)
};

class Supervision {
 public:
  Supervision(uint32_t world, double check_timeout_s, double total_timeout_s, double now_s);

  // New worker processes start, from `group` on.
  void begin_attempt(uint32_t group, double now_s);
  // One line a worker streamed; a malformed one is the worker's failure.
  void line(uint32_t rank, const std::string& text, double now_s);
  // A worker ended (`wait_status` as waitpid gives it); `last_words`: the
  // last line it wrote to stdout or stderr.
  void exited(uint32_t rank, int wait_status, const std::string& last_words, double now_s);
  // The last line a live worker wrote to stdout or stderr (for a hang).
  void said(uint32_t rank, const std::string& last_words);

  // Whether the attempt must end now, and why; the failing check is
  // recorded for that rank.
  std::optional<Stop> check(double now_s);
  // Every worker of this attempt sent its end line and exited with 0.
  bool finished() const;
  // After `stop`: every other worker has come as far (it began or finished
  // the stopped check, or is past its group) or ended. Workers that ran
  // ahead of their peers through checks that do not synchronise are then
  // not cut short of results the others have.
  bool caught_up(const Stop& stop) const;

  const std::vector<std::vector<Result>>& results() const { return results_; }

 private:
  struct Worker {
    std::string check;  // in progress
    double check_since = 0;
    uint32_t group = 0;
    bool ended = false;  // its end line came
    bool exited = false;
    int status = 0;
    std::string last_words;
    double ended_at = 0;
    std::string broken;  // a line it should not have sent
  };
  void add(uint32_t rank, Result r);
  Stop stop(uint32_t rank, std::string detail);

  uint32_t world_;
  double check_timeout_s_, deadline_s_;
  std::vector<Worker> workers_;
  std::vector<std::vector<Result>> results_;
};

// "exited with status 3", "killed by signal Aborted".
std::string describe_wait_status(int wait_status);

}  // namespace sigma::conformance
