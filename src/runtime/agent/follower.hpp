// A follower agent's decisions (every host but the first): the root's
// messages, its workers' ends and the clock in, commands out. It starts the
// workers the root asks for with the environment a follower lets through,
// signals them when asked, tells the root of every launch and end, and ends
// with the root's code once its workers are gone: at once when the root is
// lost (job_exit::unrecoverable), its workers killed; else after the
// root's goodbye, killing those still there kGoodbyeGrace_s later.
//
// The host (run_follower in follower_host.cpp) polls the root's channel
// and reaps children, and carries out the commands in order. Pure: no
// process, socket or file. Thread-safety: one thread at a time.
#pragma once

// GCC 12's false "may be used uninitialized" for a variant nested in a
// variant (see coordinator.hpp).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

#include "runtime/agent/launcher.hpp"
#include "runtime/protocol.hpp"

#include <nlohmann/json.hpp>

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <string>
#include <variant>
#include <vector>

namespace sigma::runtime::agent {

namespace follow {
struct StartWorker {  // start `device`'s worker; then tell started() or not_started()
  uint32_t device = 0;
  EnvList env;
};
struct ToRoot {  // send to the root agent
  protocol::NodeMessage message;
};
struct SignalPid {  // signal a worker process of this host
  pid_t pid = 0;
  int signal = 0;
};
struct Note {  // one line of the node's journal (the host adds the time)
  nlohmann::json entry;
};
using Command = std::variant<StartWorker, ToRoot, SignalPid, Note>;
using Commands = std::vector<Command>;
}  // namespace follow

class Follower {
 public:
  // How long workers may outlive the root's goodbye before they are killed.
  static constexpr double kGoodbyeGrace_s = 10;

  explicit Follower(uint32_t node, std::string rack = {}) : node_(node), rack_(std::move(rack)) {}

  // Connected to the root: greet it as this host's agent, process `self`.
  follow::Commands connected(pid_t self);
  follow::Commands message(const protocol::RootMessage& m, double t);
  // A message from the root that did not decode: journalled, ignored.
  follow::Commands bad_message(const std::string& why, const std::string& text);
  follow::Commands started(uint32_t device, pid_t pid);
  follow::Commands not_started(uint32_t device, const std::string& why);
  // A child of this host ended; one that is not a worker is ignored.
  follow::Commands exited(pid_t pid, const protocol::ProcessEnd& end);
  // The root's channel closed.
  follow::Commands root_closed(double t);
  follow::Commands tick(double t);

  // The job is over here: the code is known and no worker is left.
  bool over() const { return code_ >= 0 && children_.empty(); }
  // The exit code: the root's, job_exit::unrecoverable when the root was
  // lost; -1 while the job goes on.
  int code() const { return code_; }
  size_t workers() const { return children_.size(); }

 private:
  void kill_all(follow::Commands& out) const;

  uint32_t node_;
  std::string rack_;                    // this host's, told to the root
  std::map<pid_t, uint32_t> children_;  // pid -> device
  int code_ = -1;
  double ending_since_ = -1;  // the goodbye, or the root's loss
};

}  // namespace sigma::runtime::agent
