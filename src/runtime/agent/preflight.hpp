// What an agent checks before it starts anything: its options, its job
// folder (made, writable, and locked against a second agent), and that the
// vendor loads with the job's options. A refusal names the option, folder
// or vendor and the reason, and nothing has been launched.
#pragma once

#include <sigma/agent.hpp>

#include <functional>
#include <string>

namespace sigma::runtime::agent {

// Throws Error(invalid_argument) naming the first option out of range (a
// time that is not a finite positive number, a port outside -1..65535, ...).
void check_options(const AgentOptions& o);

// Holds JOB_DIR/sigmarun.lock (flock) for its lifetime. Throws
// Error(invalid_argument) when the folder is a file, Error(unavailable) when
// it cannot be made or written, or when another agent holds it (its pid
// named).
class JobDirLock {
 public:
  explicit JobDirLock(const std::string& job_dir);
  ~JobDirLock();
  JobDirLock(const JobDirLock&) = delete;
  JobDirLock& operator=(const JobDirLock&) = delete;

 private:
  int fd_ = -1;
};

// Loads the vendor with the options device 0 would get, and unloads it: a
// name no folder has, or options the plugin refuses (the sim vendor's
// scenario file with its FILE:LINE), or a host without its devices, surface
// before any worker starts. The load runs in a child process, so a plugin
// whose init blocks can neither hang the agent nor keep it from a stop: the
// child is waited for at most o.validate_timeout_s, asking `stop_signal`
// every 50 ms. Returns 0 once the vendor loaded, or the signal number
// `stop_signal` returned (the child killed). Throws Error(invalid_argument)
// when the vendor does not load or its init outlasts the timeout. Blocks;
// call it before the agent starts threads.
int preflight_vendor(const AgentOptions& o, const std::function<int()>& stop_signal);

}  // namespace sigma::runtime::agent
