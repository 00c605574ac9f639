#include "runtime/agent/metrics.hpp"

#include <sigma/error.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>
#include <cerrno>
#include <cstring>
#include <sstream>

namespace sigma::runtime::agent {

std::string render_metrics(const MetricsSnapshot& s) {
  std::ostringstream o;
  o << "# HELP sigma_steps_total Steps the job has reached.\n# TYPE sigma_steps_total counter\n"
    << "sigma_steps_total " << s.steps << "\n";
  o << "# HELP sigma_step_rate Steps per second since the start.\n# TYPE sigma_step_rate gauge\n"
    << "sigma_step_rate " << (s.wall_s > 0 ? static_cast<double>(s.steps) / s.wall_s : 0.0) << "\n";
  o << "# HELP sigma_incidents_total Faults and migrations handled.\n# TYPE sigma_incidents_total counter\n"
    << "sigma_incidents_total " << s.incidents << "\n";
  o << "# HELP sigma_spares_available Validated devices waiting as spares.\n# TYPE sigma_spares_available "
       "gauge\n"
    << "sigma_spares_available " << s.spares << "\n";
  o << "# HELP sigma_device_health_score 1 healthy .. 0 failed.\n# TYPE sigma_device_health_score gauge\n";
  for (const auto& d : s.devices) {
    o << "sigma_device_health_score{device=\"" << d.device << "\",health=\"" << d.health << "\",state=\""
      << d.state << "\"} " << d.score << "\n";
  }
  const nlohmann::json l = s.ledger.to_json(s.wall_s);
  o << "# HELP sigma_goodput_lost_seconds Wall time lost, by cause.\n# TYPE sigma_goodput_lost_seconds "
       "counter\n";
  for (auto& [cause, v] : l["lost_s"].items()) {
    o << "sigma_goodput_lost_seconds{cause=\"" << cause << "\"} " << v.get<double>() << "\n";
  }
  o << "# HELP sigma_goodput Fraction of wall time not lost.\n# TYPE sigma_goodput gauge\n"
    << "sigma_goodput " << l["goodput"].get<double>() << "\n";
  return o.str();
}

MetricsServer::MetricsServer(int port) {
  fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd_ < 0) throw Error(Code::unavailable, std::string("agent: metrics socket: ") + std::strerror(errno));
  const int one = 1;
  ::setsockopt(fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::listen(fd_, 16) != 0) {
    const int e = errno;
    ::close(fd_);
    throw Error(Code::unavailable,
                "agent: cannot serve metrics on 127.0.0.1:" + std::to_string(port) + ": " + std::strerror(e));
  }
  socklen_t len = sizeof a;
  ::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len);
  port_ = ntohs(a.sin_port);
  thread_ = std::thread([this] { serve(); });
}

MetricsServer::~MetricsServer() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
  ::close(fd_);
}

void MetricsServer::publish(const MetricsSnapshot& s) {
  std::string body = render_metrics(s);
  std::lock_guard<std::mutex> lk(mu_);
  body_ = std::move(body);
}

void MetricsServer::serve() {
  while (!stop_) {
    pollfd p{fd_, POLLIN, 0};
    if (::poll(&p, 1, 100) <= 0) continue;
    const int c = ::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (c < 0) continue;
    timeval tv{1, 0};
    ::setsockopt(c, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    std::string req;
    char buf[1024];
    while (req.find("\r\n\r\n") == std::string::npos && req.size() < 8192) {
      const ssize_t n = ::recv(c, buf, sizeof buf, 0);
      if (n <= 0) break;
      req.append(buf, static_cast<size_t>(n));
    }
    std::string status = "200 OK", body;
    if (req.rfind("GET /metrics ", 0) == 0 || req.rfind("GET /metrics?", 0) == 0) {
      std::lock_guard<std::mutex> lk(mu_);
      body = body_;
    } else {
      status = "404 Not Found";
      body = "only /metrics is served here\n";
    }
    const std::string resp =
        "HTTP/1.1 " + status +
        "\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: " + std::to_string(body.size()) +
        "\r\nConnection: close\r\n\r\n" + body;
    (void)!::send(c, resp.data(), resp.size(), MSG_NOSIGNAL);
    ::close(c);
  }
}

}  // namespace sigma::runtime::agent
