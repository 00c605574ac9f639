// What an agent does on its own host: start a worker process for a device
// with the environment the session reads, and wake its loop when a child
// exits. The root agent's host is host.cpp; every other host's is
// follower_host.cpp (run_follower in <sigma/agent.hpp>).
#pragma once

#include <sigma/agent.hpp>

#include <sys/types.h>

#include <string>
#include <utility>
#include <vector>

namespace sigma::runtime::agent {

using EnvList = std::vector<std::pair<std::string, std::string>>;

// The plugin options of one worker: `options` with each "{device}" replaced
// by its device number.
std::string vendor_options_for(const std::string& options, uint32_t device);

// Starts the worker for `device` with this host's environment, `env` from
// the root agent, and this host's SIGMA_JOB_DIR / SIGMA_HAL_PLUGIN /
// SIGMA_HAL_OPTIONS; stdout and stderr go to JOB_DIR/logs/device-N.log.
// Throws Error(invalid_argument) when the program cannot be started.
pid_t spawn_worker(const AgentOptions& o, uint32_t device, const EnvList& env);

// What a follower lets through of the environment the root asks a worker
// to get: the agent's own SIGMA_* variables only, never LD_PRELOAD, PATH or
// anything a forged root could run code with. Returns the kept pairs and
// the refused names.
std::pair<EnvList, std::vector<std::string>> allowed_env(const EnvList& given);

// The control store all agents of a job meet in: STORE/sigmarun-JOB_ID.
std::string control_store_uri(const AgentOptions& o);
// What the MAC in the root's record in the control store covers: the job,
// the root's address and the run's nonce.
std::string root_record_text(const std::string& job_id, const std::string& addr, const std::string& nonce);

// A non-blocking pipe whose reading end wakes a poll() loop: SIGCHLD writes
// to it (installed once per process), and so does wake().
int wake_pipe();
// Writes one byte to the pipe. Async-signal-safe.
void wake() noexcept;
// Empties it (call after poll() returns).
void drain_wake_pipe();

}  // namespace sigma::runtime::agent
