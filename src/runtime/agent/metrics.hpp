// Prometheus text exposition on loopback: GET /metrics, served by
// cpp-httplib's pool of threads with 1 s read and write timeouts (a slow or
// silent client holds one thread for at most that, never the others); the
// agent loop publishes a snapshot about once a second.
#pragma once

#include "runtime/agent/records.hpp"

#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace httplib {
class Server;
}

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
  std::unique_ptr<httplib::Server> server_;
  int port_ = 0;
  std::mutex mu_;
  std::string body_;  // guarded by mu_
  std::thread thread_;
};

}  // namespace sigma::runtime::agent
