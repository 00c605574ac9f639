#include "runtime/agent/ending.hpp"

#include <csignal>
#include <utility>

namespace sigma::runtime::agent {

Ending::Stop Ending::requested(int signal, bool training, double t) {
  const bool again = signal_ != 0;
  signal_ = signal;
  if (again || !training || finished_) return Stop::now;
  deadline_ = t + kStopDeadlineS;
  return Stop::at_boundary;
}

const char* Ending::signal_name() const { return signal_ == SIGINT ? "SIGINT" : "SIGTERM"; }

void Ending::end(std::string status, std::string why, int code, double t) {
  status_ = std::move(status);
  why_ = std::move(why);
  code_ = code;
  finished_ = true;
  finished_at_ = t;
}

bool Ending::stragglers_due(double t) {
  if (!finished_ || t - finished_at_ <= (signal_ != 0 ? kStoppedGraceS : kGoodbyeGraceS)) return false;
  finished_at_ = t;
  return true;
}

}  // namespace sigma::runtime::agent
