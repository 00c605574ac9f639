// What an agent does on its own host: start a worker process for a device
// with the environment the session reads, and — on every host but the
// first — follow the root agent: start the workers it asks for, report
// their exits, signal them when told.
#pragma once

#include "agent.hpp"

#include <sys/types.h>

#include <string>
#include <utility>
#include <vector>

namespace sigma::sigmarun {

using EnvList = std::vector<std::pair<std::string, std::string>>;

// Starts the worker for `device` with this host's environment, `env` from
// the root agent, and this host's SIGMA_JOB_DIR / SIGMA_HAL_PLUGIN /
// SIGMA_HAL_OPTIONS; stdout and stderr go to JOB_DIR/logs/device-N.log.
// Throws Error(invalid_argument) when the program cannot be started.
// The plugin options of one worker: `options` with each "{device}" replaced
// by its device number.
std::string vendor_options_for(const std::string& options, uint32_t device);

pid_t spawn_worker(const Options& o, uint32_t device, const EnvList& env);

// "killed by signal Killed", "exited with status 3".
std::string describe_status(int status);

// The control store all agents of a job meet in: STORE/sigmarun-JOB_ID.
std::string control_store_uri(const Options& o);

// Makes SIGCHLD write a byte to a non-blocking pipe and returns its reading
// end, so a poll() loop wakes the moment a child exits. Once per process.
int sigchld_pipe();
// Empties that pipe (call after poll() returns).
void drain_sigchld_pipe();
// Makes SIGTERM and SIGINT wake the same pipe and be remembered instead of
// ending the process; stop_signal() is the last one received (0: none).
void catch_stop_signals();
int stop_signal();

// Runs a follower agent (node_rank >= 1). Exit status: the root's.
int run_follower(const Options& o);

}  // namespace sigma::sigmarun
