// The agent's host state (Agent::Impl), shared by host.cpp (the run, the
// commands carried out, the end) and host_io.cpp (endpoints, greetings,
// messages, reaping, the poll loop). One thread owns it all.
#pragma once

#include "runtime/agent/coordinator.hpp"
#include "runtime/agent/inbound.hpp"
#include "runtime/agent/journal.hpp"
#include "runtime/agent/metrics.hpp"
#include "runtime/agent/series.hpp"
#include "runtime/channel.hpp"
#include "runtime/job_key.hpp"
#include "runtime/protocol.hpp"

#include <sigma/agent.hpp>
#include <sigma/health.hpp>

#include <sys/types.h>

#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace sigma::runtime {

struct Agent::Impl {
  AgentOptions o;
  AgentObserver observer;
  std::atomic<int> stop_request{0};
  double t0 = health::monotonic_s();
  std::unique_ptr<agent::Coordinator> core;
  std::unique_ptr<agent::Journal> journal;
  std::unique_ptr<agent::MetricsServer> metrics;
  std::vector<std::unique_ptr<Channel>> workers;  // [device]
  std::vector<pid_t> pids;                        // [device], on its host
  std::vector<std::string> tokens;                // [device]: its launch's SIGMA_WORKER_TOKEN
  std::vector<std::unique_ptr<Channel>> nodes;    // [node] -> its agent (1..nnodes-1)
  std::vector<std::unique_ptr<Channel>> pending;  // connected, not yet greeted
  int listen_fd = -1, tcp_fd = -1;
  std::string tcp_addr, store_uri;
  std::optional<JobKey> key;  // from o.secret: every connection authenticated
  int stop_seen = 0;
  double last_progress = 0;
  agent::Series series;
  agent::Inbound inbound;                       // what this agent reads, for the report
  std::optional<protocol::StepDone> last_step;  // rank 0's latest, for the progress line
  double tokens_per_s = 0;
  uint64_t tokens_total = 0;  // rank 0's StepDone.tokens summed, for /metrics

  double now() const { return health::monotonic_s() - t0; }
  int run();
  void open_endpoints();
  void carry_out(agent::Commands commands);
  void spawn(uint32_t device);
  void greeted(std::unique_ptr<Channel> ch, const nlohmann::json& first);
  void read_messages(uint32_t device);
  void node_messages(uint32_t node);
  void reap();
  void poll_once(int wake_fd);
  void progress_tick();
  void step_done(const protocol::StepDone& s);
  void finish();
};

}  // namespace sigma::runtime
