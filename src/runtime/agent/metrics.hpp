// Prometheus text exposition on loopback: GET /metrics. One thread serves
// the last published snapshot; the agent loop publishes about once a second.
#pragma once

#include "runtime/agent/records.hpp"

#include <atomic>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace sigma::runtime::agent {

// The exposition text of a snapshot (also used by the tests).
std::string render_metrics(const MetricsSnapshot& s);

class MetricsServer {
 public:
  // Binds 127.0.0.1:port (0: any free port). Throws Error(unavailable).
  explicit MetricsServer(int port);
  ~MetricsServer();
  MetricsServer(const MetricsServer&) = delete;
  MetricsServer& operator=(const MetricsServer&) = delete;
  int port() const { return port_; }
  void publish(const MetricsSnapshot& s);

 private:
  void serve();
  int fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::mutex mu_;
  std::string body_;  // guarded by mu_
  std::thread thread_;
};

}  // namespace sigma::runtime::agent
