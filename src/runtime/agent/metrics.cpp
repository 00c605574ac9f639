#include "runtime/agent/metrics.hpp"

#include <sigma/error.hpp>

#include <httplib.h>

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

MetricsServer::MetricsServer(int port) : server_(std::make_unique<httplib::Server>()) {
  server_->set_read_timeout(1, 0);
  server_->set_write_timeout(1, 0);
  server_->set_keep_alive_max_count(1);
  server_->Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    std::lock_guard<std::mutex> lk(mu_);
    res.set_content(body_, "text/plain; version=0.0.4");
  });
  server_->set_error_handler([](const httplib::Request&, httplib::Response& res) {
    if (res.status == 404) res.set_content("only /metrics is served here\n", "text/plain");
  });
  port_ = port == 0 ? server_->bind_to_any_port("127.0.0.1")
                    : (server_->bind_to_port("127.0.0.1", port) ? port : -1);
  if (port_ <= 0)
    throw Error(Code::unavailable, "agent: cannot serve metrics on 127.0.0.1:" + std::to_string(port) + ": " +
                                       std::strerror(errno));
  thread_ = std::thread([this] { server_->listen_after_bind(); });
}

MetricsServer::~MetricsServer() {
  server_->stop();
  if (thread_.joinable()) thread_.join();
}

void MetricsServer::publish(const MetricsSnapshot& s) {
  std::string body = render_metrics(s);
  std::lock_guard<std::mutex> lk(mu_);
  body_ = std::move(body);
}

}  // namespace sigma::runtime::agent
