// Stopping and ending the job, for the agent's Coordinator: a stop request
// stops every rank after a step none has begun, within a deadline, or at
// once; the end's status, reason and exit code; and the grace after the
// goodbye before the workers still there are killed.
//
// Pure: requests and a clock in, decisions out. Thread-safety: one thread
// at a time.
#pragma once

#include <cstdint>
#include <string>

namespace sigma::runtime::agent {

class Ending {
 public:
  // A stop at a step boundary must be done by then; after it, the job stops at once.
  static constexpr double kStopDeadlineS = 5;
  // Told to go and still there after this long: killed.
  static constexpr double kGoodbyeGraceS = 10;
  // ... when a signal stops the job, which must end within 10 s whatever its phase.
  static constexpr double kStoppedGraceS = 3;

  enum class Stop : uint8_t {
    at_boundary,  // every rank stops after a step none has begun
    now,          // end the job now
  };
  // A stop asked for by `signal` (SIGTERM or SIGINT). A second request, or
  // a job not training (`training` false: not started, recovering or
  // ended), stops now.
  Stop requested(int signal, bool training, double t);
  bool stopping() const { return signal_ != 0; }
  int signal() const { return signal_; }
  const char* signal_name() const;  // "SIGINT" or "SIGTERM"
  // Stopping at a boundary: whether to end now (every rank stopped, or the
  // deadline passed).
  bool stop_due(bool all_stopped, double t) const { return all_stopped || t > deadline_; }

  // The job ends: every worker is to be told goodbye.
  void end(std::string status, std::string why, int code, double t);
  bool finished() const { return finished_; }
  // Finished with workers still there: whether to kill them now (the grace
  // starts again when it says so).
  bool stragglers_due(double t);

  int code() const { return code_; }
  const std::string& status() const { return status_; }
  const std::string& why() const { return why_; }

 private:
  int signal_ = 0;
  double deadline_ = -1;
  bool finished_ = false;
  double finished_at_ = -1;  // when the workers were last told to go (or killed)
  int code_ = 0;
  std::string status_ = "done", why_;
};

}  // namespace sigma::runtime::agent
